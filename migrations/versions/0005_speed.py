"""Speed: a claim that stays flat at ten million rows, ops queries that answer fast on them, a shorter hold of the
sender's pacing row, leaner bulk and webhook writes.

Revision ID: 0005_speed
Revises: 0004_scale
"""
from wa_outbox.migrate import run_sql_file

revision = "0005_speed"
down_revision = "0004_scale"
branch_labels = None
depends_on = None


def upgrade() -> None:
    run_sql_file("0005_speed.up.sql")


def downgrade() -> None:
    run_sql_file("0005_speed.down.sql")
