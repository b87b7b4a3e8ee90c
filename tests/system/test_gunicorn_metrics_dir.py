"""The Prometheus multiprocess directory of a real gunicorn (wa_outbox/gunicorn_conf.py): one it made goes when the
master exits; one given in PROMETHEUS_MULTIPROC_DIR stays."""

from __future__ import annotations

from pathlib import Path

from tests.processes import gunicorn


def _serve_and_stop(database_url: str, tmp: Path, **extra: str) -> None:
    """Start gunicorn with TMPDIR=tmp, scrape /metrics once (it is up), stop it with SIGTERM."""
    with gunicorn(database_url, ready_path="/metrics", WEB_CONCURRENCY="1", TMPDIR=str(tmp), **extra):
        made = list(tmp.glob("wa-outbox-metrics-*"))
        if "PROMETHEUS_MULTIPROC_DIR" not in extra:
            assert len(made) == 1 and any(made[0].iterdir()), made  # the workers' metric files are in it


def test_the_directory_gunicorn_made_is_removed_when_the_master_exits(database_url, tmp_path):
    _serve_and_stop(database_url, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_given_directory_is_left_alone(database_url, tmp_path):
    given = tmp_path / "given"
    given.mkdir()
    _serve_and_stop(database_url, tmp_path, PROMETHEUS_MULTIPROC_DIR=str(given))
    assert given.is_dir() and any(given.iterdir())  # still there, with the workers' files
    assert list(tmp_path.glob("wa-outbox-metrics-*")) == []
