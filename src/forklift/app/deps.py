"""What routes depend on (FastAPI dependencies): a database session per request, the storage, and the principal
with at least a role."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated

from fastapi import Depends, Path, Request, Security
from fastapi.security import APIKeyCookie, APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from forklift.app.security import COOKIE, CSRF_HEADER, Principal, authenticate
from forklift.app.storage import Storage
from forklift.serve.responses import HttpError


def database(request: Request) -> Iterator[Session]:
    with request.app.state.sessionmaker() as session:
        yield session


def storage(request: Request) -> Storage:
    storage: Storage = request.app.state.storage
    return storage


# the session ends with the route function, before the answer is sent: a streamed answer (events, a download)
# holds no database connection while a slow client reads it
Db = Annotated[Session, Depends(database, scope="function")]
RowId = Annotated[int, Path(ge=1, le=2**31 - 1, description="a record's id")]
Files = Annotated[Storage, Depends(storage)]


# How a request says who it is, as /openapi.json describes it (and /docs's Authorize button offers it): an API
# token as a bearer token, or the session cookie of a login with the CSRF token on every change. `authenticate`
# reads them itself; these only describe them (none refuses a request on its own).
_TOKEN = HTTPBearer(auto_error=False, description="an API token (made by: forklift app token add NAME --user USER)")
_COOKIE = APIKeyCookie(name=COOKIE, auto_error=False, description="the session of POST /api/login")
_CSRF = APIKeyHeader(name=CSRF_HEADER, auto_error=False,
                     description="with the session cookie, on every change: the csrf of GET /api/session")  # fmt: skip


def _role(role: str) -> Callable[..., Principal]:
    def check(
        request: Request,
        session: Db,
        _token: Annotated[HTTPAuthorizationCredentials | None, Security(_TOKEN)],
        _cookie: Annotated[str | None, Security(_COOKIE)],
        _csrf: Annotated[str | None, Security(_CSRF)],
    ) -> Principal:
        principal = authenticate(request, session)
        if not principal.may(role):
            raise HttpError(403, f"{principal.name} is {_a(principal.role)}; this needs {_a(role)} or more")
        return principal

    return check


Viewer = Annotated[Principal, Depends(_role("viewer"))]
Editor = Annotated[Principal, Depends(_role("editor"))]
Admin = Annotated[Principal, Depends(_role("admin"))]


def _a(role: str) -> str:
    """The role with its article: a viewer, an editor, an admin."""
    return f"{'an' if role[0] in 'aeiou' else 'a'} {role}"
