"""Worker heartbeats in wa_outbox.workers: monitoring alerts when a worker's heartbeat goes stale."""

from __future__ import annotations

import json
import os
import socket

import sqlalchemy as sa

from .. import db


def beat(engine: sa.Engine, worker_id: str, state: str, info: dict) -> None:
    db.execute(engine, "heartbeat", {"worker_id": worker_id, "hostname": socket.gethostname(), "pid": os.getpid(),
                                 "state": state, "info": json.dumps(info)})


def gone(engine: sa.Engine, worker_id: str) -> None:
    db.execute(engine, "worker_gone", {"worker_id": worker_id})
