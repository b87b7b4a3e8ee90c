"""A checkout migrates with its own migrations/: also where the virtualenv's editable install of wa-outbox is another
checkout's (a second git worktree sharing the first one's .venv), whose wa_outbox._migrations is that one's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from wa_outbox import migrate

ROOT = Path(__file__).resolve().parents[2]


def test_the_checkout_imported_migrates_with_its_own_migrations():
    assert migrate.MIGRATIONS_DIR == ROOT / "migrations"
    newest = sorted(p.stem for p in (ROOT / "migrations" / "versions").glob("0*.py"))[-1]
    assert migrate.head() == newest


def test_from_elsewhere_with_the_checkout_on_pythonpath(tmp_path):
    shown = subprocess.run([sys.executable, "-c", "from wa_outbox import migrate; print(migrate.MIGRATIONS_DIR)"],
                           cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": ""}, capture_output=True, text=True,
                           timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.strip() == str(ROOT / "migrations")
