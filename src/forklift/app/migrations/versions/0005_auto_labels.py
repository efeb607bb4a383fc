"""auto labels: each annotation's source (a person or a model, with its confidence) and the auto-label runs

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "autolabel_runs",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("dataset_id", sa.Integer(), nullable=False),
        sa.Column("model_id", sa.Integer(), nullable=True),
        sa.Column("video_id", sa.Integer(), nullable=True),
        sa.Column("threshold", sa.Float(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("done", sa.Integer(), nullable=False),
        sa.Column("boxes", sa.Integer(), nullable=False),
        sa.Column("created_by", sa.String(length=80), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.Column("error", sa.String(length=2000), nullable=True),
        sa.ForeignKeyConstraint(["dataset_id"], ["datasets.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["model_id"], ["models.id"], ondelete="SET NULL"),
        sa.ForeignKeyConstraint(["video_id"], ["videos.id"], ondelete="SET NULL"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("autolabel_runs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_autolabel_runs_dataset_id"), ["dataset_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_autolabel_runs_state"), ["state"], unique=False)
    with op.batch_alter_table("annotations", schema=None) as batch_op:
        batch_op.add_column(sa.Column("source", sa.String(length=8), server_default="human", nullable=False))
        batch_op.add_column(sa.Column("model_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("confidence", sa.Float(), nullable=True))
        batch_op.create_foreign_key("fk_annotations_model_id", "models", ["model_id"], ["id"], ondelete="SET NULL")


def downgrade() -> None:
    with op.batch_alter_table("annotations", schema=None) as batch_op:
        batch_op.drop_constraint("fk_annotations_model_id", type_="foreignkey")
        batch_op.drop_column("confidence")
        batch_op.drop_column("model_id")
        batch_op.drop_column("source")
    with op.batch_alter_table("autolabel_runs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_autolabel_runs_state"))
        batch_op.drop_index(batch_op.f("ix_autolabel_runs_dataset_id"))
    op.drop_table("autolabel_runs")
