"""Accounts for an app served beyond loopback: `forklift app user add|list|remove` and `forklift app token
add|list|remove` work on the database directly (the app need not run)."""

from __future__ import annotations

import re

from sqlalchemy import select
from sqlalchemy.orm import Session

from forklift.app.security import MAX_PASSWORD, MIN_PASSWORD, hash_password, new_token
from forklift.app.tables import ROLES, ApiToken, User
from forklift.errors import ForkliftError

USER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,79}")  # a name is part of URLs (/api/users/NAME)


def add_user(session: Session, name: str, role: str, password: str) -> User:
    if not USER_NAME.fullmatch(name):
        raise ForkliftError(f"user {name!r}: letters, digits and . _ @ - only, starting with a letter or digit, at "
                            "most 80 characters (the name is part of the API's URLs)")  # fmt: skip
    if role not in ROLES:
        raise ForkliftError(f"--role {role}: one of {', '.join(ROLES)}")
    if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        raise ForkliftError(f"the password: {MIN_PASSWORD} to {MAX_PASSWORD} characters")
    if session.scalar(select(User).where(User.name == name)) is not None:
        raise ForkliftError(f"user {name}: exists already")
    user = User(name=name, role=role, password_hash=hash_password(password))
    session.add(user)
    session.commit()
    return user


def remove_user(session: Session, name: str) -> User:
    """Remove the account (its API tokens go with it; its session cookies are refused from then on). The last
    admin stays: without one, an app served beyond loopback would not start again."""
    user = session.scalar(select(User).where(User.name == name))
    if user is None:
        raise ForkliftError(f"user {name}: no such user (forklift app user list shows them)")
    # the admins' rows locked until the commit (PostgreSQL), so that two admins removing each other at once cannot
    # both see the other one left; SQLite has one writer at a time
    admins = len(session.scalars(select(User.id).where(User.role == "admin").with_for_update()).all())
    if user.role == "admin" and admins <= 1:
        raise ForkliftError(f"user {name}: the last admin cannot be removed (add another admin first)")
    session.delete(user)
    session.commit()
    return user


def add_token(session: Session, user_name: str, name: str) -> str:
    """A new API token for the user; returned once (only its hash is kept)."""
    user = session.scalar(select(User).where(User.name == user_name))
    if user is None:
        raise ForkliftError(f"--user {user_name}: no such user (forklift app user add makes one)")
    token, digest = new_token()
    session.add(ApiToken(user_id=user.id, name=name, token_hash=digest))
    session.commit()
    return token


def tokens(session: Session) -> list[tuple[str, str, str]]:
    """Every API token as (account, token name, when made), by account and name: what `token remove` takes."""
    rows = session.execute(select(User.name, ApiToken.name, ApiToken.created_at).join(ApiToken.user)
                           .order_by(User.name, ApiToken.name))  # fmt: skip
    return [(user, name, f"{made:%Y-%m-%d %H:%M}") for user, name, made in rows]


def remove_tokens(session: Session, user_name: str, name: str) -> int:
    """Revoke the user's tokens of that name (a script's token leaked or no longer needed); how many there were."""
    found = session.scalars(select(ApiToken).join(ApiToken.user)
                            .where(User.name == user_name, ApiToken.name == name)).all()  # fmt: skip
    if not found:
        raise ForkliftError(f"token {name!r} of user {user_name}: none such (forklift app token list shows them)")
    for token in found:
        session.delete(token)
    session.commit()
    return len(found)


def has_admin(session: Session) -> bool:
    return session.scalar(select(User.id).where(User.role == "admin").limit(1)) is not None
