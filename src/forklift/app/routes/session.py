"""/api/session, /api/login, /api/logout: who is using the app, and signing in and out (accounts exist only when
the app is served beyond loopback)."""

from __future__ import annotations

import contextlib

from fastapi import APIRouter, Request, Response
from sqlalchemy import select, update

from forklift.app import schemas
from forklift.app.deps import Db
from forklift.app.security import COOKIE, authenticate, check_csrf, session_user
from forklift.app.tables import User, new_session_key
from forklift.serve.responses import HttpError

router = APIRouter(prefix="/api", tags=["session"])


@router.get("/session")
def who(request: Request, session: Db) -> schemas.SessionOut:
    principal = authenticate(request, session)
    value = request.app.state.sessions.read(request.cookies.get(COOKIE, "")) or {}
    return schemas.SessionOut(name=principal.name, role=principal.role, local=request.app.state.config.local,
                              csrf=value.get("csrf"))  # fmt: skip


@router.post("/login")
def login(body: schemas.LoginIn, request: Request, response: Response, session: Db) -> schemas.SessionOut:
    """Refused with 401 for a wrong name or password, and with 429 once its client address or the account has
    failed too often (forklift.app.login_guard)."""
    guard = request.app.state.login_guard
    address = request.client.host if request.client else "unknown"
    with guard.attempt(address, body.name) as attempt:
        user = session.scalar(select(User).where(User.name == body.name))
        matched = guard.password_matches(user.password_hash if user else None, body.password)
        attempt.failed = user is None or not matched
    if user is None or not matched:
        raise HttpError(401, "wrong name or password")
    cookie, csrf = request.app.state.sessions.issue(user.id, user.session_key)
    response.set_cookie(COOKIE, cookie, max_age=request.app.state.sessions.max_age, httponly=True, samesite="strict",
                        path="/")  # fmt: skip
    return schemas.SessionOut(name=user.name, role=user.role, local=False, csrf=csrf)


@router.post("/logout", status_code=204)
def logout(request: Request, response: Response, session: Db) -> None:
    """End the session: its cookie is deleted, and its account draws a new session key, so that the
    cookie is refused even where a copy of it was kept (every session of the account ends with it: a signed cookie
    is known by nothing else). With a good cookie the CSRF header is needed, as for every change. An API token is
    not a session: a logout sent with one alone is refused (422) rather than answered as if the token had ended."""
    value = request.app.state.sessions.read(request.cookies.get(COOKIE, ""))
    if value is None and request.headers.get("authorization", "").lower().startswith("bearer "):
        raise HttpError(422, "an API token is not logged out: /api/logout ends a browser session; revoke the token "
                             "with forklift app token remove NAME --user USER")  # fmt: skip
    user = None
    if value is not None and not request.app.state.config.local:
        with contextlib.suppress(HttpError):  # a cookie that is no good any more: only deleted
            user = session_user(session, value)
    if user is not None and value is not None:
        check_csrf(request, value)
        session.execute(update(User).where(User.id == user.id, User.session_key == user.session_key)
                        .values(session_key=new_session_key()))  # fmt: skip
        session.commit()
    response.delete_cookie(COOKIE, path="/")
