"""Who is asking, and may they: accounts, sessions, API tokens and CSRF.

On loopback the app runs for one local user with an admin's rights and no login. Anywhere else every request
needs a session cookie (after `POST /api/login`) or an API token (`Authorization: Bearer ...`, for scripts).
Passwords are hashed with Argon2 (argon2-cffi). The session cookie is signed (itsdangerous) with a key kept in
the data directory, HttpOnly and SameSite=Strict; a request that changes something with a session must also
carry the session's CSRF token in `X-CSRF-Token` (a page of another site can make the browser send the cookie,
but cannot read the token). A cookie carries its account's random session key: logging out draws a new key, which
ends the account's cookies everywhere (a copy kept of one is refused too). Roles: a viewer looks, an editor
changes data, an admin also manages accounts (`/api/users`; they are added on the server, `forklift app user`).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from pathlib import Path

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from fastapi import Request
from itsdangerous import BadSignature, URLSafeTimedSerializer
from sqlalchemy import select
from sqlalchemy.orm import Session

from forklift.app.tables import ROLES, ApiToken, User
from forklift.serve.responses import HttpError

COOKIE = "forklift_session"
CSRF_HEADER = "x-csrf-token"
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
MIN_PASSWORD, MAX_PASSWORD = 8, 1024  # characters
_hasher = PasswordHasher()


@dataclass(frozen=True)
class Principal:
    """Who a request acts for."""

    name: str
    role: str
    user_id: int | None = None  # None: the local user (loopback, no accounts)

    def may(self, role: str) -> bool:
        return ROLES.index(self.role) >= ROLES.index(role)


LOCAL = Principal("local", "admin")


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def password_matches(password_hash: str, password: str) -> bool:
    try:
        return _hasher.verify(password_hash, password)
    except (VerificationError, InvalidHashError):
        return False


def new_token() -> tuple[str, str]:
    """(the token to show once, the hash to keep)."""
    token = "fk_" + secrets.token_urlsafe(32)
    return token, token_hash(token)


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def api_token(session: Session, token: str) -> ApiToken | None:
    """The API token this app issued as `token` (the bearer value), or None."""
    return session.scalar(select(ApiToken).where(ApiToken.token_hash == token_hash(token)))


def secret_key(data_dir: Path) -> str:
    """The key that signs session cookies: made once per data directory, readable by its owner only."""
    path = data_dir / "secret.key"
    if not path.is_file():
        partial = path.with_suffix(".partial")
        partial.write_text(secrets.token_urlsafe(48))
        partial.chmod(0o600)
        partial.replace(path)
    return path.read_text().strip()


class Sessions:
    """Signed session cookies: {user id, the account's session key, CSRF token}, valid for `hours`."""

    def __init__(self, key: str, hours: int) -> None:
        self.serializer = URLSafeTimedSerializer(key, salt="forklift-session")
        self.max_age = hours * 3600

    def issue(self, user_id: int, session_key: str) -> tuple[str, str]:
        """(cookie value, CSRF token)."""
        csrf = secrets.token_urlsafe(24)
        return self.serializer.dumps({"user": user_id, "key": session_key, "csrf": csrf}), csrf

    def read(self, cookie: str) -> dict | None:
        try:
            value = self.serializer.loads(cookie, max_age=self.max_age)
        except BadSignature:
            return None
        return value if isinstance(value, dict) else None


def authenticate(request: Request, session: Session) -> Principal:
    """The principal of a request, or 401; with a session cookie and a changing method, the CSRF check (403)."""
    if request.app.state.config.local:
        return LOCAL
    header = request.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        token = api_token(session, header[7:].strip())
        if token is None:
            raise HttpError(401, "the API token is not known (forklift app token add makes one)")
        return Principal(token.user.name, token.user.role, token.user.id)
    cookie = request.cookies.get(COOKIE)
    value = request.app.state.sessions.read(cookie) if cookie else None
    if value is None:
        raise HttpError(401, "log in first")
    user = session_user(session, value)
    check_csrf(request, value)
    return Principal(user.name, user.role, user.id)


def session_user(session: Session, value: dict) -> User:
    """The account of a cookie's `value` while the cookie is good, or 401: the account was removed, or logged out
    of since the cookie was issued."""
    user = session.get(User, value.get("user")) if isinstance(value.get("user"), int) else None
    if user is None:
        raise HttpError(401, "this account no longer exists")
    key = value.get("key")
    if not isinstance(key, str) or not hmac.compare_digest(key, user.session_key):
        raise HttpError(401, "this session has ended (logged out); log in again")
    return user


def check_csrf(request: Request, value: dict) -> None:
    """A changing request with a session cookie must carry its CSRF token (403): another site's page can make the
    browser send the cookie, but cannot read the token."""
    if request.method not in SAFE_METHODS and not secrets.compare_digest(
        request.headers.get(CSRF_HEADER, ""), str(value.get("csrf", ""))
    ):
        raise HttpError(403, f"missing or wrong {CSRF_HEADER} header (cross-site request refused)")
