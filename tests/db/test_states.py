"""The words the database stores are the words Python knows: each enum in wa_outbox.states against the CHECK
constraint of a migrated database."""

from __future__ import annotations

import re

import pytest

from wa_outbox.states import (
    CampaignStatus,
    DeliveryStatus,
    EndpointState,
    EventType,
    HoldReason,
    MessageStatus,
    TimelineEvent,
    WebhookEventKind,
    WebhookEventStatus,
)


def _check_words(db, table: str, column: str) -> set[str]:
    definitions = [row[0] for row in db.execute(
        "SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c JOIN pg_class t ON t.oid = c.conrelid "
        "JOIN pg_namespace n ON n.oid = t.relnamespace "
        "WHERE n.nspname = 'wa_outbox' AND t.relname = %s AND c.contype = 'c'", (table,))]
    mine = [d for d in definitions if re.search(rf"\({column} = ANY|\(\({column} = ANY|\b{column}\b.*ANY", d)
            and "ARRAY" in d]
    assert len(mine) == 1, definitions
    return set(re.findall(r"'([a-z_.]+)'::text", mine[0]))


@pytest.mark.parametrize("table, column, words", [
    ("notifications", "status", MessageStatus),
    ("notifications", "hold_reason", HoldReason),
    ("notification_events", "event", TimelineEvent),
    ("webhook_events", "status", WebhookEventStatus),
    ("webhook_events", "kind", WebhookEventKind),
    ("campaigns", "status", CampaignStatus),
    ("events", "type", EventType),
    ("endpoints", "state", EndpointState),
    ("deliveries", "status", DeliveryStatus),
])
def test_python_and_the_schema_know_the_same_words(db, table, column, words):
    assert _check_words(db, table, column) == {w.value for w in words}
