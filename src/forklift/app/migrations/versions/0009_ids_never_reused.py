"""ids never reused: SQLite gives a new row the largest id there is plus one, so removing the newest data set, image
or job gave its id to the next one added, and an old link or a page still open on the removed one reached the new
one (a stale page could save its boxes onto another image). AUTOINCREMENT keeps ids rising; SQLite needs each table
rebuilt for it. PostgreSQL's sequences never go back: nothing to do there.

The rebuilt tables start counting after their largest id; ids of rows removed before this migration above it are
not known any more and may be given once again.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

TABLES = (
    "users",
    "api_tokens",
    "datasets",
    "labels",
    "videos",
    "images",
    "annotations",
    "jobs",
    "models",
    "deployments",
    "autolabel_runs",
)


def _rebuild(*, autoincrement: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    for table in TABLES:
        with op.batch_alter_table(table, recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}):
            pass


def upgrade() -> None:
    _rebuild(autoincrement=True)


def downgrade() -> None:
    _rebuild(autoincrement=False)
