"""Inbound webhooks, routed: which secrets verify a POST, and which app and sender its changes belong to. Pure.

The web holds the registry in memory (registry_watch.py) as `Routes`: the secrets that verify (every registered
app's active ones, during a rotation the previous one until its overlap ends, plus WHATSAPP_APP_SECRET as app None)
and who owns each business account (WABA) and number. For each signed POST:

- its app is the one whose secret verified it (webhooks.verifying_apps);
- each change is attributed by `value.metadata.phone_number_id` and, for changes without one (template, account
  and capability updates: Meta sends them to the app's default callback even when a number has a callback override,
  https://developers.facebook.com/documentation/business-messaging/whatsapp/webhooks/override/), by `entry[].id`,
  the WABA;
- a change for a number or WABA the registry gives to another app refuses the whole POST (`WrongApp`: nothing is
  stored; Meta's own deliveries never do this, a misconfigured or forged one does);
- a change for a number (or, without one, a WABA) that is not registered is stored and acknowledged, attributed to
  no sender, and flagged `unregistered` (counted, shown on /ops).

Single-number mode (the environment only: no sender or business account in the database) routes nothing: every POST
is stored as before, app None, nothing flagged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import NamedTuple

from .registry import Registry
from .webhooks import WebhookEvent, verifying_apps


class WrongApp(Exception):
    """A POST verified by one app names a business account or number that belongs to another: refused (403)."""

    status = 403


class Candidate(NamedTuple):
    app_id: str | None           # None: WHATSAPP_APP_SECRET
    key: bytes                   # the secret, UTF-8
    expires_at: float | None     # epoch seconds: a rotated-out secret verifies until then; None: current


@dataclass(frozen=True, slots=True)
class Routes:
    """The registry as the receiver reads it, built once per reload (`routes_of`)."""
    candidates: tuple[Candidate, ...] = field(repr=False)
    app_of_waba: Mapping[str, str]
    app_of_number: Mapping[str, str | None]  # every sender the registry holds (the environment's: app None)
    registered: bool                         # any sender or business account in the database

    def verify(self, body: bytes, header: str | None, now: float) -> list[str | None]:
        """The apps whose active secrets signed `body`: SignatureError when none did."""
        return verifying_apps(self.candidates, body, header, now)


def routes_of(registry: Registry) -> Routes:
    candidates = tuple(Candidate(s.app_id, s.secret.encode(), _epoch(s.expires_at)) for s in registry.app_secrets)
    return Routes(candidates, {w: a.app_id for w, a in registry.business_accounts.items()},
                  {n: s.app_id for n, s in registry.senders.items()},
                  bool(registry.business_accounts) or any(not s.from_environment for s in registry.senders.values()))


def _epoch(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


class Routed(NamedTuple):
    app_id: str | None                      # stored on every event of the POST
    unregistered: tuple[bool, ...] | None   # per event, in order; None: none is
    numbers: int = 0                        # how many events are for an unregistered number ...
    wabas: int = 0                          # ... or, without a number, for an unregistered business account


def route(routes: Routes, verified_by: Sequence[str | None], events: Sequence[WebhookEvent]) -> Routed:
    """The app to store a verified POST's events under and which of them are unregistered. Raises WrongApp when
    the registry gives one of its WABAs or numbers to an app whose secret did not verify it."""
    if not routes.registered:
        return Routed(_preferred(verified_by), None)
    owner: str | None = None
    flags = []
    numbers = wabas = 0
    for event in events:
        claimed = []  # (what, its app) the registry says
        if event.account_id is not None and event.account_id in routes.app_of_waba:
            claimed.append((f"business account {event.account_id}", routes.app_of_waba[event.account_id]))
        number_known = event.phone_number_id is not None and event.phone_number_id in routes.app_of_number
        if number_known:
            app_of_number = routes.app_of_number[event.phone_number_id]  # type: ignore[index]  # checked above
            if app_of_number is not None:  # the environment's number belongs to no registered app
                claimed.append((f"number {event.phone_number_id}", app_of_number))
        for what, claimant in claimed:
            if claimant not in verified_by:
                raise WrongApp(f"signed by {_signer(verified_by)}, but {what} belongs to app {claimant}")
            if owner is not None and owner != claimant:
                raise WrongApp(f"one POST names business accounts or numbers of two apps ({owner} and {claimant})")
            owner = claimant
        if event.dead_reason is not None:  # no change to route: a body that could not be split
            flags.append(False)
        elif event.phone_number_id is not None:
            flags.append(not number_known)
            numbers += not number_known
        else:
            unknown = event.account_id not in routes.app_of_waba
            flags.append(unknown)
            wabas += unknown
    app_id = owner if owner is not None else _preferred(verified_by)
    return Routed(app_id, tuple(flags) if numbers or wabas else None, numbers, wabas)


def _preferred(verified_by: Sequence[str | None]) -> str | None:
    """A registered app over WHATSAPP_APP_SECRET when both verified (the environment's secret is that app's)."""
    return next((app_id for app_id in verified_by if app_id is not None), None)


def _signer(verified_by: Sequence[str | None]) -> str:
    return " and ".join("WHATSAPP_APP_SECRET" if a is None else f"app {a}" for a in verified_by)
