"""`wa-outbox dev` makes endpoints work out of the box: private addresses allowed (a receiver on this machine) and,
without WA_OUTBOX_SECRET_KEY, a development key made once in the data dir, never printed, the same every run."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import requests

from tests.live import wait_for
from tests.processes import free_port
from wa_outbox.cli.processes import dev_secret_key_file
from wa_outbox.secret_box import SecretBox

ROOT = Path(__file__).resolve().parents[2]
AUTH = {"Authorization": "Bearer dev-api-token-0123456789"}


def run_dev(database_url: str, data_dir: Path) -> tuple[str, str]:
    """One `wa-outbox dev`: registers an endpoint on a local address through /v1; returns its secret and the output."""
    web_port, sim_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WHATSAPP_", "WA_OUTBOX_"))}
    env.update(DATABASE_URL=database_url, WA_OUTBOX_DATA_DIR=str(data_dir))
    proc = subprocess.Popen([sys.executable, "-m", "wa_outbox.cli", "dev", "--port", str(web_port),
                             "--simulator-port", str(sim_port)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    web = f"http://127.0.0.1:{web_port}"
    try:
        def up() -> bool:
            assert proc.poll() is None
            try:
                return requests.get(f"{web}/readyz", timeout=5).ok
            except requests.RequestException:
                return False
        wait_for(up, timeout=60, interval=0.2, what="dev's web up")
        made = requests.post(f"{web}/v1/endpoints", json={"url": f"http://127.0.0.1:{free_port()}/"}, headers=AUTH,
                             timeout=10)
        assert made.status_code == 201, made.text
        secret = made.json()["secret"]
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        output = proc.communicate(timeout=30)[0]
    return secret, output


def test_dev_allows_local_endpoints_under_a_key_kept_in_the_data_dir(database_url, db, tmp_path):
    first, output = run_dev(database_url, tmp_path)
    key_file = tmp_path / "dev-secret-key"
    key = key_file.read_text().strip()
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert key not in output and first not in output
    assert f"WA_OUTBOX_SECRET_KEY=$(cat {key_file}) wa-outbox events listen --port" in output

    second, _ = run_dev(database_url, tmp_path)
    assert key_file.read_text().strip() == key  # made once
    stored = [bytes(r[0]) for r in db.execute("SELECT secret_enc FROM wa_outbox.endpoints ORDER BY created_at")]
    assert [SecretBox([key]).decrypt(s) for s in stored] == [first, second]


def test_the_key_file_is_made_once(tmp_path):
    path = dev_secret_key_file(str(tmp_path / "data"))
    key = path.read_text()
    assert dev_secret_key_file(str(tmp_path / "data")).read_text() == key
    SecretBox([key.strip()])  # a valid Fernet key
