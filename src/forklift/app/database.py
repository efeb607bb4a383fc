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

from forklift.app.columns import check_flush
from forklift.errors import ForkliftError

MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def sqlite_file(data_dir: Path) -> Path:
    """The app's SQLite database in its data directory (there unless --db names another)."""
    return data_dir / "app.db"


def sqlite_url(data_dir: Path) -> str:
    return f"sqlite:///{sqlite_file(data_dir)}"


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
    """Apply every migration the database has not had yet. SQLite alters a table by building a new one and dropping
    the old, so its foreign keys are off meanwhile: on, the drop would cascade to every row that refers to it."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    sqlite = engine.dialect.name == "sqlite"
    with engine.connect() as connection:
        if sqlite:  # outside a transaction, where SQLite ignores it
            connection.exec_driver_sql("PRAGMA foreign_keys=OFF")
            connection.commit()
        try:
            with connection.begin():
                config.attributes["connection"] = connection
                command.upgrade(config, "head")
        finally:
            if sqlite:  # the pooled connection goes back as every other is
                connection.exec_driver_sql("PRAGMA foreign_keys=ON")
                connection.commit()


def session_factory(engine: Engine) -> sessionmaker[Session]:
    """Sessions whose every flush checks the text it writes (forklift.app.columns)."""
    factory = sessionmaker(engine, expire_on_commit=False)
    event.listen(factory, "before_flush", check_flush)
    return factory


def sessions(factory: sessionmaker[Session]) -> Iterator[Session]:
    with factory() as session:
        yield session
