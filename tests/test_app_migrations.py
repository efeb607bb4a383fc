"""The app's migrations: they build exactly the schema the tables describe, and a database of an older version is
brought up to date with its rows kept."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from forklift.app.database import MIGRATIONS, make_engine, sqlite_url, upgrade
from forklift.app.tables import Base


def _upgrade_to(engine, revision: str) -> None:  # type: ignore[no-untyped-def]
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def test_the_migrations_build_the_tables_schema(tmp_path: Path) -> None:
    engine = make_engine(sqlite_url(tmp_path))
    upgrade(engine)
    with engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), Base.metadata)
    assert differences == []


def test_an_older_databases_rows_survive_and_its_annotations_become_a_persons(tmp_path: Path) -> None:
    engine = make_engine(sqlite_url(tmp_path))
    _upgrade_to(engine, "0004")
    with engine.begin() as connection:
        connection.execute(
            text("INSERT INTO datasets (id, name, task, created_at) VALUES (1, 'd', 'detect', '2026-01-01')")
        )
        connection.execute(text("INSERT INTO labels (id, dataset_id, name) VALUES (1, 1, 'dog')"))
        connection.execute(text(
            "INSERT INTO images (id, dataset_id, file, original_name, width, height, split, status, version, "
            "created_at) VALUES (1, 1, 'f.png', 'f.png', 8, 8, 'train', 'labelled', 1, '2026-01-01')"
        ))  # fmt: skip
        connection.execute(text("INSERT INTO annotations (id, image_id, label_id, kind, points) "
                                "VALUES (1, 1, 1, 'box', '[0, 0, 4, 4]')"))  # fmt: skip
        connection.execute(text(
            "INSERT INTO jobs (id, dataset_id, model, settings, state, out_dir, created_by, created_at, epoch, epochs) "
            "VALUES (1, 1, 'yolov3-tiny', '{}', 'done', 'jobs/1', 'local', '2026-01-01', 3, 3)"
        ))  # fmt: skip
        connection.execute(text("INSERT INTO models (id, name, dir, job_id, dataset_id, settings, metrics, created_at) "
                                "VALUES (1, 'm', 'jobs/1/model', 1, 1, '{}', '{}', '2026-01-01')"))  # fmt: skip
    upgrade(engine)  # later migrations rebuild images and jobs, which annotations and models refer to
    with engine.connect() as connection:
        row = connection.execute(text("SELECT source, model_id, confidence, points FROM annotations")).one()
        assert tuple(row) == ("human", None, None, "[0, 0, 4, 4]")
        assert tuple(connection.execute(text("SELECT job_id, dataset_id FROM models")).one()) == (1, 1)
        assert tuple(connection.execute(text("SELECT device, class_id, class_confidence FROM jobs, images")).one()) == (
            "cpu",
            None,
            None,
        )
        assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1  # on again for the app's writes


def test_accounts_from_before_session_keys_keep_their_rows(tmp_path: Path) -> None:
    engine = make_engine(sqlite_url(tmp_path))
    _upgrade_to(engine, "0007")
    with engine.begin() as connection:
        connection.execute(text("INSERT INTO users (id, name, role, password_hash, created_at) "
                                "VALUES (1, 'ana', 'admin', 'h', '2026-01-01')"))  # fmt: skip
        connection.execute(text("INSERT INTO api_tokens (id, user_id, name, token_hash, created_at) "
                                "VALUES (1, 1, 'script', 'abc', '2026-01-01')"))  # fmt: skip
    upgrade(engine)  # 0008 rebuilds users, which api_tokens refers to
    with engine.connect() as connection:
        name, role, key = connection.execute(text("SELECT name, role, session_key FROM users")).one()
        assert (name, role) == ("ana", "admin") and len(key) == 32  # each account given a random key
        assert connection.execute(text("SELECT count(*) FROM api_tokens")).scalar() == 1


def test_an_older_database_keeps_its_rows_and_stops_reusing_ids(tmp_path: Path) -> None:
    engine = make_engine(sqlite_url(tmp_path))
    _upgrade_to(engine, "0008")
    with engine.begin() as connection:
        for dataset in (1, 2):
            connection.execute(text("INSERT INTO datasets (id, name, task, created_at) "
                                    f"VALUES ({dataset}, 'd{dataset}', 'detect', '2026-01-01')"))  # fmt: skip
        connection.execute(text("INSERT INTO labels (id, dataset_id, name) VALUES (1, 2, 'dog')"))
    upgrade(engine)  # 0009 rebuilds every table with AUTOINCREMENT
    with engine.begin() as connection:
        assert connection.execute(text("SELECT id, name FROM datasets ORDER BY id")).all() == [(1, "d1"), (2, "d2")]
        assert connection.execute(text("SELECT dataset_id, name FROM labels")).all() == [(2, "dog")]
        connection.execute(text("DELETE FROM datasets WHERE id = 2"))  # the newest: its label goes with it
        assert connection.execute(text("SELECT count(*) FROM labels")).scalar() == 0
        connection.execute(text("INSERT INTO datasets (name, task, created_at) VALUES ('d3', 'detect', '2026-01-02')"))
        assert connection.execute(text("SELECT max(id) FROM datasets")).scalar() == 3


def test_names_held_twice_are_numbered_and_a_models_second_deployment_goes(tmp_path: Path) -> None:
    """Before 0010 only the app's check kept names apart, and two requests at once could pass it together."""
    engine = make_engine(sqlite_url(tmp_path))
    _upgrade_to(engine, "0009")
    long = "x" * 200
    sets = ("d", "d", "d (2)", "d", long, long)
    with engine.begin() as connection:
        for row, name in enumerate(sets, start=1):
            connection.execute(text("INSERT INTO datasets (id, name, task, created_at) "
                                    "VALUES (:id, :name, 'detect', '2026-01-01')"),
                               {"id": row, "name": name})  # fmt: skip
        for row in (1, 2):
            connection.execute(text("INSERT INTO models (id, name, dir, settings, metrics, created_at) "
                                    f"VALUES ({row}, 'm', 'models/{row}', '{{}}', '{{}}', '2026-01-01')"))  # fmt: skip
        for row, model in ((1, 1), (2, 1), (3, 2)):
            deployment = f"({row}, {model}, 'model{model}', {9000 + row}, 'ana', '2026-01-01')"
            connection.execute(text(f"INSERT INTO deployments (id, model_id, name, port, created_by, created_at) "
                                    f"VALUES {deployment}"))  # fmt: skip
    upgrade(engine)
    with engine.begin() as connection:
        named = connection.execute(text("SELECT id, name FROM datasets ORDER BY id")).all()
        assert named == [(1, "d"), (2, "d (3)"), (3, "d (2)"), (4, "d (4)"), (5, long), (6, "x" * 196 + " (2)")]
        assert connection.execute(text("SELECT name FROM models ORDER BY id")).scalars().all() == ["m", "m (2)"]
        assert connection.execute(text("SELECT id FROM deployments ORDER BY id")).scalars().all() == [1, 3]
    for twin in ("INSERT INTO datasets (name, task, created_at) VALUES ('d', 'detect', '2026-01-02')",
                 "INSERT INTO deployments (model_id, name, port, created_by, created_at) "
                 "VALUES (2, 'model2', 9100, 'ana', '2026-01-02')"):  # fmt: skip
        with pytest.raises(IntegrityError), engine.begin() as connection:
            connection.execute(text(twin))  # the database keeps them apart, whatever asks it
