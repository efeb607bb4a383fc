"""label merges: where a label merged into another went, so that a page still holding the old label follows it
there as it follows a rename (it took the label for deleted, and gave its new shapes the label chosen now).

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "label_merges",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("label_id", sa.Integer(), nullable=False),
        sa.Column("into_id", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["dataset_id"], ["datasets.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["into_id"], ["labels.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("label_id"),
        sqlite_autoincrement=True,
    )
    with op.batch_alter_table("label_merges", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_label_merges_dataset_id"), ["dataset_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_label_merges_into_id"), ["into_id"], unique=False)


def downgrade() -> None:
    op.drop_table("label_merges")
