"""auto classes: a classification image's class may be a model's, with its confidence, until a person reviews it

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("images", schema=None) as batch_op:
        batch_op.add_column(sa.Column("class_model_id", sa.Integer(), nullable=True))
        batch_op.add_column(sa.Column("class_confidence", sa.Float(), nullable=True))
        batch_op.create_foreign_key(
            "fk_images_class_model_id", "models", ["class_model_id"], ["id"], ondelete="SET NULL"
        )


def downgrade() -> None:
    with op.batch_alter_table("images", schema=None) as batch_op:
        batch_op.drop_constraint("fk_images_class_model_id", type_="foreignkey")
        batch_op.drop_column("class_confidence")
        batch_op.drop_column("class_model_id")
