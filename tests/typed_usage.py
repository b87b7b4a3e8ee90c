"""The public API as an app uses it, type-checked with `mypy --strict` by tests/system/test_packaging.py (never run).

Each `assert_type` fails if a signature loses its types (returns Any, or takes untyped arguments); each
`# type: ignore[…]` marks a call mypy must refuse, and `--strict` reports the ignore as unused if it does not.
"""

from __future__ import annotations

from typing import assert_type

import psycopg
import sqlalchemy as sa
from flask import Flask
from sqlalchemy.orm import Session

from wa_outbox import Connectable, InvalidMessage, enqueue, enqueue_many
from wa_outbox.config import Settings
from wa_outbox.web import create_app

TEXT = {"type": "text", "text": {"body": "Your order shipped"}}


def with_sqlalchemy(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        assert_type(enqueue(conn, to="+5511987654321", message=TEXT, idempotency_key="order-42-shipped",
                            correlation_id="req-abc"), int)
        assert_type(enqueue_many(conn, [{"to": "+5511987654321", "message": TEXT}]), list[int])
    with Session(engine) as session, session.begin():
        assert_type(enqueue(session, to="+5511987654321", message=TEXT, phone_number_id="100000000000001"), int)


def through(conn: Connectable) -> list[int]:
    return enqueue_many(conn, [{"to": "+5511987654321", "message": TEXT, "idempotency_key": "k"}])


def with_psycopg(url: str) -> None:
    with psycopg.connect(url) as conn:
        assert_type(enqueue(conn, to="+5511987654321", message=TEXT), int)
        assert_type(enqueue_many(conn, []), list[int])


def refused(engine: sa.Engine) -> None:
    with engine.begin() as conn:
        enqueue(conn, to=5511987654321, message=TEXT)  # type: ignore[arg-type]
        enqueue(conn, "+5511987654321", TEXT)  # type: ignore[call-arg]
        enqueue(object(), to="+5511987654321", message=TEXT)  # type: ignore[arg-type]


def reason(engine: sa.Engine) -> str:
    try:
        with engine.begin() as conn:
            enqueue(conn, to="not a number", message=TEXT)
    except InvalidMessage as exc:
        assert_type(exc, InvalidMessage)
        return str(exc)
    return ""


def app(settings: Settings, engine: sa.Engine) -> Flask:
    return assert_type(create_app(settings, engine=engine, metrics=False), Flask)
