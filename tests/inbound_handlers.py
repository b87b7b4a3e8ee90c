"""An application's inbound handler, loaded by dotted path in tests (WA_OUTBOX_INBOUND_HANDLERS)."""

received: list[dict] = []


def on_event(event: dict) -> None:
    received.append(event)


not_callable = 42
