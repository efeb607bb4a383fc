"""one record a name: a data set's and a model's name is the database's to keep unique, and a model is deployed
once. The app checked before each insert, so two requests at the same moment (two API clients, two tabs) could
both pass and make two sets of one name, which no list, job or export could tell apart, or start two servers for
one model.

A name held twice already is given a number (`name (2)`, `name (3)`...), the oldest record keeping it as it was.
A model's second deployment record is removed (the first is the one the app restores and stops).

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

NAMED = (("datasets", 200), ("models", 200))  # table, its name column's length


def _number_twins(table: str, length: int) -> None:
    connection = op.get_bind()
    rows = connection.execute(sa.text(f"SELECT id, name FROM {table} ORDER BY id")).all()
    taken = {name for _, name in rows}
    kept: set[str] = set()
    for row_id, name in rows:
        if name in kept:
            number = 2
            while (new := name[: length - len(f" ({number})")] + f" ({number})") in taken:
                number += 1
            connection.execute(sa.text(f"UPDATE {table} SET name = :name WHERE id = :id"), {"name": new, "id": row_id})
            taken.add(new)
            name = new
        kept.add(name)


def upgrade() -> None:
    for table, length in NAMED:
        _number_twins(table, length)
        op.create_index(op.f(f"ix_{table}_name"), table, ["name"], unique=True)
    op.execute("DELETE FROM deployments WHERE id NOT IN (SELECT MIN(id) FROM deployments GROUP BY model_id)")
    op.drop_index(op.f("ix_deployments_model_id"), table_name="deployments")
    op.create_index(op.f("ix_deployments_model_id"), "deployments", ["model_id"], unique=True)


def downgrade() -> None:
    op.drop_index(op.f("ix_deployments_model_id"), table_name="deployments")
    op.create_index(op.f("ix_deployments_model_id"), "deployments", ["model_id"], unique=False)
    for table, _ in NAMED:
        op.drop_index(op.f(f"ix_{table}_name"), table_name=table)
