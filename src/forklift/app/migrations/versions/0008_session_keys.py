"""session keys: logging out ends an account's session cookies (each carries its account's random session key)

A random key rather than a counter: SQLite may give a removed account's id to the next one added, and a counter
would then start at the same value, so a removed account's cookie would pass as the new account's.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import secrets

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.add_column(sa.Column("session_key", sa.String(64), nullable=True))
    users = sa.table("users", sa.column("id", sa.Integer), sa.column("session_key", sa.String))
    connection = op.get_bind()
    for (user_id,) in connection.execute(sa.select(users.c.id)).all():
        connection.execute(users.update().where(users.c.id == user_id).values(session_key=secrets.token_hex(16)))
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.alter_column("session_key", existing_type=sa.String(64), nullable=False)


def downgrade() -> None:
    with op.batch_alter_table("users", schema=None) as batch_op:
        batch_op.drop_column("session_key")
