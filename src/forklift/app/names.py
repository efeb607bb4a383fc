"""Data sets and models are known by their names (in lists, jobs, exports, the import of an export), so the database
keeps each name to one record (a unique index). A name the app makes is one nobody holds; a name a person gives that
another record holds is a 409, whether that record was there before or another request made it a moment ago."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import InstrumentedAttribute, Session

from forklift.app.columns import fitted
from forklift.serve.responses import HttpError


def unused_name(session: Session, column: InstrumentedAttribute[str], head: str, tails: Iterable[str]) -> str:
    """The first `head` + tail (cut to fit `column`) that no record holds."""
    for tail in tails:
        name = fitted(column, head, tail)
        if session.scalar(select(column).where(column == name).limit(1)) is None:
            return name
    raise HttpError(409, f"{head!r}: every name made from it is taken; rename some of its records first")


def numbered(tail: str = "", *, word: str = "") -> Iterator[str]:
    """The tails that make a name unused: `tail` (with ` (word)`), then numbered: `tail (2)` or `tail (word 2)`..."""
    yield f"{tail} ({word})" if word else tail
    for number in range(2, 10_000):
        yield f"{tail} ({word} {number})" if word else f"{tail} ({number})"


def flush_unique(session: Session, refusal: str) -> None:
    """Flush a record just made or renamed; what the database's unique indexes refuse (a name another record holds,
    a model deployed twice) is a 409 saying `refusal`."""
    try:
        session.flush()
    except IntegrityError as exc:
        session.rollback()
        raise HttpError(409, refusal) from exc
