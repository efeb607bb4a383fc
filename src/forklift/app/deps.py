"""What routes depend on (FastAPI dependencies): a database session per request, the storage, and the principal
with at least a role."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated

from fastapi import Depends, Path, Request
from sqlalchemy.orm import Session

from forklift.app.security import Principal, authenticate
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


def _role(role: str) -> Callable[[Request, Session], Principal]:
    def check(request: Request, session: Db) -> Principal:
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
