"""Text is checked against its column before the database sees it: at most the column's length, and no NUL.

PostgreSQL refuses both (a 500 where it happens), SQLite keeps whatever it is given: one check, made in Python for
both, makes a value refused by one refused by the other, with an error that names the field. Every flush checks
the rows it writes (`check_flush`), so that no route can miss it; code that writes a file before its row, or text
with an INSERT of its own, calls `check_text` first, so that nothing is left on disk for a row that cannot be kept.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import String, inspect
from sqlalchemy.orm import DeclarativeBase, InstrumentedAttribute, Session

from forklift.errors import ForkliftError


class TextRefused(ForkliftError):
    """A text too long for its column, or with a NUL in it (the app answers 422)."""


def check_text(table: type[DeclarativeBase], **values: Any) -> None:
    """Refuse any of `values` (column name: value) that its column of `table` cannot keep."""
    columns = table.__table__.columns
    for name, value in values.items():
        kind = columns[name].type
        if not isinstance(value, str) or not isinstance(kind, String):
            continue
        length = kind.length
        shown = value if len(value) <= 40 else value[:40] + "…"
        where = f"{table.__tablename__}.{name} {shown!r}"
        if length is not None and len(value) > length:
            raise TextRefused(f"{where}: {len(value)} characters, at most {length}")
        if "\x00" in value:
            raise TextRefused(f"{where}: has a NUL character")


def fitted(column: InstrumentedAttribute[str], head: str, tail: str = "") -> str:
    """`head` + `tail` for a name the app makes (a copy's, a frame's), `head` cut short where both would not fit
    `column`."""
    length: int = column.property.columns[0].type.length
    return head[: max(0, length - len(tail))] + tail


def check_flush(session: Session, _context: object, _instances: object) -> None:
    for row in (*session.new, *session.dirty):
        state = inspect(row)  # values as set, none loaded from the database for the check
        check_text(type(row), **{attr.key: attr.loaded_value for attr in state.attrs if attr.key in row.__table__.c})
