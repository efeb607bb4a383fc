"""The app's database: an engine for SQLite (default, in the data directory) or PostgreSQL (by URL), its schema
brought up to date by Alembic's migrations at every start (existing data kept), and sessions per request."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

from forklift.errors import ForkliftError

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def sqlite_url(data_dir: Path) -> str:
    return f"sqlite:///{data_dir / 'app.db'}"


def make_engine(url: str) -> Engine:
    """An engine for `url`; SQLite gets foreign keys on (cascades) and a busy timeout for concurrent writers."""
    try:
        engine = create_engine(url, pool_pre_ping=True)
    except Exception as exc:  # SQLAlchemy raises several kinds for a malformed URL or a missing driver
        raise ForkliftError(f"--db {url}: not a database URL SQLAlchemy can open ({exc})") from exc
    if engine.dialect.name == "sqlite":

        @event.listens_for(engine, "connect")
        def _on_connect(connection: Any, _record: Any) -> None:
            cursor = connection.cursor()
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA busy_timeout=5000")
            cursor.close()

    return engine


def upgrade(engine: Engine) -> None:
    """Apply every migration the database has not had yet."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def session_factory(engine: Engine) -> sessionmaker[Session]:
    return sessionmaker(engine, expire_on_commit=False)


def sessions(factory: sessionmaker[Session]) -> Iterator[Session]:
    with factory() as session:
        yield session
