"""`wa-outbox events`: the events for apps, read from the feed (`tail`) or received as an endpoint (`listen`)."""

from __future__ import annotations

import click


@click.group()
def events() -> None:
    """Events for apps: read the feed, or receive deliveries as an endpoint would."""
