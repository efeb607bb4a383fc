"""job devices: each training job queues for one device (cpu or cuda:N); jobs from before ran on the CPU

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("device", sa.String(length=16), nullable=False, server_default="cpu"))
        batch_op.create_index(batch_op.f("ix_jobs_device"), ["device"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("jobs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_jobs_device"))
        batch_op.drop_column("device")
