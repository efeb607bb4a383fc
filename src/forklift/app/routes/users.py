"""/api/users: the accounts of an app served beyond loopback, for admins only: list them, remove one. Accounts are
added with `forklift app user add` on the server, where a password is typed rather than sent through a page."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path
from sqlalchemy import select

from forklift.app import schemas
from forklift.app.accounts import remove_user
from forklift.app.deps import Admin, Db
from forklift.app.tables import User
from forklift.errors import ForkliftError
from forklift.serve.responses import HttpError

router = APIRouter(prefix="/api/users", tags=["accounts"])
UserName = Annotated[
    str, Path(min_length=1, max_length=80, pattern=schemas.ACCOUNT_NAME, description="an account's name")
]


@router.get("")
def list_users(session: Db, _: Admin) -> list[schemas.UserOut]:
    users = session.scalars(select(User).order_by(User.name))
    return [
        schemas.UserOut(name=user.name, role=user.role, created_at=user.created_at)  # type: ignore[arg-type]
        for user in users
    ]


@router.delete("/{name}", status_code=204)
def delete_user(name: UserName, session: Db, _: Admin) -> None:
    """Remove the account and its API tokens; its sessions end. The last admin is kept (409)."""
    if session.scalar(select(User.id).where(User.name == name)) is None:
        raise HttpError(404, f"no user {name}")
    try:
        remove_user(session, name)
    except ForkliftError as exc:
        raise HttpError(409, str(exc)) from exc
