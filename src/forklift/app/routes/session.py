"""/api/session, /api/login, /api/logout: who is using the app, and signing in and out (accounts exist only when
the app is served beyond loopback)."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from sqlalchemy import select

from forklift.app import schemas
from forklift.app.deps import Db
from forklift.app.errors import AppError
from forklift.app.security import COOKIE, authenticate, password_matches
from forklift.app.tables import User

router = APIRouter(prefix="/api", tags=["session"])


@router.get("/session")
def who(request: Request, session: Db) -> schemas.SessionOut:
    principal = authenticate(request, session)
    value = request.app.state.sessions.read(request.cookies.get(COOKIE, "")) or {}
    return schemas.SessionOut(name=principal.name, role=principal.role, local=request.app.state.config.local,
                              csrf=value.get("csrf"))  # fmt: skip


@router.post("/login")
def login(body: schemas.LoginIn, request: Request, response: Response, session: Db) -> schemas.SessionOut:
    user = session.scalar(select(User).where(User.name == body.name))
    if user is None or not password_matches(user.password_hash, body.password):
        raise AppError(401, "wrong name or password")
    cookie, csrf = request.app.state.sessions.issue(user.id)
    response.set_cookie(COOKIE, cookie, max_age=request.app.state.sessions.max_age, httponly=True, samesite="strict",
                        path="/")  # fmt: skip
    return schemas.SessionOut(name=user.name, role=user.role, local=False, csrf=csrf)


@router.post("/logout", status_code=204)
def logout(response: Response) -> None:
    response.delete_cookie(COOKIE, path="/")
