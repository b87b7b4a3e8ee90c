"""Endpoints: the operations every surface shares (`wa-outbox endpoints …`, /v1/endpoints, the ops page).

An endpoint is an app's receiver: the workers POST each event matching its filter to its URL, signed as the Standard
Webhooks specification says with its secret (`whsec_` + base64 of 32 random bytes, https://www.standardwebhooks.com/).
The secret is shown once, when it is made (add, rotate-secret), and stored encrypted under WA_OUTBOX_SECRET_KEY
(secret_box.py); everything else shows its fingerprint. Bad input raises EndpointError (EndpointNotFound for an
unknown id) before anything is written.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import secrets
import string
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from . import queries
from .config import Settings
from .endpoint_urls import url_problem
from .secret_box import SecretBox, fingerprint
from .states import EndpointState, EventType

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32             # the spec asks for 24 to 64
ID_PREFIX = "ep_"
ID_CHARS = 16                 # alphanumerics after ep_ (the schema allows 8 to 64)
MAX_DESCRIPTION = 500
DEFAULT_OVERLAP_HOURS = 24.0  # how long a rotated-out secret keeps signing beside the new one
MAX_OVERLAP_HOURS = 24.0 * 30
MAX_DELIVERIES_SHOWN = 500
_ALPHANUMERIC = string.ascii_letters + string.digits


class EndpointError(ValueError):
    """Input an endpoint operation refuses (a bad URL, an unknown event type, …): nothing was changed."""


class EndpointNotFound(EndpointError):
    def __init__(self, endpoint_id: str) -> None:
        super().__init__(f"no endpoint {endpoint_id}")


@dataclass(frozen=True, slots=True)
class NewSecret:
    """An endpoint with the secret just made for it: the only time the secret leaves the database."""
    endpoint: queries.EndpointRow
    secret: str


def new_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


def is_secret(value: object) -> bool:
    """Whether `value` has a signing secret's form: whsec_ and the base64 of at least 16 bytes."""
    if not isinstance(value, str) or not value.startswith(SECRET_PREFIX):
        return False
    try:
        return len(base64.b64decode(value[len(SECRET_PREFIX):], validate=True)) >= 16
    except ValueError:  # binascii.Error
        return False


def new_id() -> str:
    return ID_PREFIX + "".join(secrets.choice(_ALPHANUMERIC) for _ in range(ID_CHARS))


def is_endpoint_id(value: object) -> bool:
    """The schema's rule for ids (endpoints_id_check), checked before asking the database."""
    return (isinstance(value, str) and value.startswith(ID_PREFIX) and 8 <= len(value) - len(ID_PREFIX) <= 64
            and all(c in _ALPHANUMERIC for c in value[len(ID_PREFIX):]))


def parse_event_types(value: str | Iterable[str] | None) -> list[str] | None:
    """The filter: None (every type) or the listed types, each one of EventType's words ('a,b' or a list)."""
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else list(value)
    if not all(isinstance(item, str) for item in items):
        raise EndpointError("event types must be strings")
    types = list(dict.fromkeys(item.strip() for item in items if item.strip()))
    if not types:
        return None if isinstance(value, str) else _refuse_empty()
    known = {t.value for t in EventType}
    unknown = [t for t in types if t not in known]
    if unknown:
        raise EndpointError(f"unknown event type(s) {', '.join(map(repr, unknown))}: expected one of "
                            f"{', '.join(sorted(known))}")
    return types


def _refuse_empty() -> list[str]:
    raise EndpointError("an empty list of event types would deliver nothing: leave it out for every type")


def check_url(url: object, settings: Settings) -> str:
    problem = url_problem(url, allow_private=settings.endpoints_allow_private) if isinstance(url, str) else \
        "the URL must be a string"
    if problem:
        raise EndpointError(f"endpoint URL refused: {problem}")
    assert isinstance(url, str)
    return url


def check_description(description: object) -> str | None:
    if description is None or description == "":
        return None
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION or "\x00" in description:
        raise EndpointError(f"the description is text of at most {MAX_DESCRIPTION} characters (no NUL)")
    return description


def check_id(endpoint_id: object) -> str:
    if not is_endpoint_id(endpoint_id):
        raise EndpointNotFound(str(endpoint_id)[:80])
    assert isinstance(endpoint_id, str)
    return endpoint_id


def add(engine: sa.Engine, settings: Settings, *, url: object, event_types: str | Iterable[str] | None = None,
        ordered: bool = False, description: object = None) -> NewSecret:
    """Register an endpoint; its secret is returned this once. Its deliveries start with the events committed
    after it was added (add_endpoint.sql)."""
    checked_url = check_url(url, settings)
    types = parse_event_types(event_types)
    text = check_description(description)
    if not isinstance(ordered, bool):
        raise EndpointError("ordered must be true or false")
    box = SecretBox.of(settings, "an endpoint's signing secret")
    secret = new_secret()
    row = queries.add_endpoint(engine, id=new_id(), url=checked_url, description=text, event_types=types,
                               ordered=ordered, secret_enc=box.encrypt(secret), secret_fingerprint=fingerprint(secret))
    return NewSecret(row, secret)


def public(row: queries.EndpointRow) -> dict[str, Any]:
    """An endpoint as `--json` and /v1 show it: `events` is its filter (null: every type); never a secret."""
    shown = dataclasses.asdict(row)
    shown["events"] = shown.pop("event_types")
    return shown


def list_all(engine: sa.Engine) -> list[queries.EndpointRow]:
    return queries.list_endpoints(engine, id=None)


def show(engine: sa.Engine, endpoint_id: object) -> queries.EndpointRow:
    found = queries.list_endpoints(engine, id=check_id(endpoint_id))
    if not found:
        raise EndpointNotFound(str(endpoint_id))
    return found[0]


def disable(engine: sa.Engine, endpoint_id: object) -> queries.EndpointStateSet:
    """Stop delivering to it (reason 'operator'); a disabled endpoint keeps its reason and time."""
    return _set_state(engine, endpoint_id, EndpointState.DISABLED)


def enable(engine: sa.Engine, endpoint_id: object) -> queries.EndpointStateSet:
    """Deliver to it again; its failing state is cleared (the N-days rule starts over)."""
    return _set_state(engine, endpoint_id, EndpointState.ENABLED)


def _set_state(engine: sa.Engine, endpoint_id: object, state: EndpointState) -> queries.EndpointStateSet:
    result = queries.set_endpoint_state(engine, id=check_id(endpoint_id), state=state.value,
                                        reason="operator" if state is EndpointState.DISABLED else None)
    if result is None:
        raise EndpointNotFound(str(endpoint_id))
    return result


def check_overlap(hours: object) -> float:
    if isinstance(hours, bool) or not isinstance(hours, (int, float)) or not 0 <= hours <= MAX_OVERLAP_HOURS:
        raise EndpointError(f"the overlap is a number of hours from 0 to {MAX_OVERLAP_HOURS:g}")
    return float(hours)


def rotate_secret(engine: sa.Engine, settings: Settings, endpoint_id: object,
                  overlap_hours: object = DEFAULT_OVERLAP_HOURS) -> tuple[queries.EndpointSecretRotated, str]:
    """A new secret (returned this once); the previous one keeps signing beside it for `overlap_hours`."""
    checked = check_id(endpoint_id)
    overlap = check_overlap(overlap_hours)
    box = SecretBox.of(settings, "an endpoint's signing secret")
    secret = new_secret()
    result = queries.rotate_endpoint_secret(engine, id=checked, secret_enc=box.encrypt(secret),
                                            secret_fingerprint=fingerprint(secret), overlap_seconds=overlap * 3600)
    if result is None:
        raise EndpointNotFound(str(endpoint_id))
    return result, secret


def remove(engine: sa.Engine, endpoint_id: object) -> None:
    if not queries.remove_endpoint(engine, id=check_id(endpoint_id)):
        raise EndpointNotFound(str(endpoint_id))


def deliveries(engine: sa.Engine, endpoint_id: object, *, failed: bool = False,
               limit: int = 50) -> list[queries.DeliveryRow]:
    """Its recent deliveries, newest event first, each with its attempts."""
    checked = check_id(endpoint_id)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_DELIVERIES_SHOWN:
        raise EndpointError(f"the limit is 1 to {MAX_DELIVERIES_SHOWN}")
    show(engine, checked)  # an unknown id is an error, not an empty list
    return queries.endpoint_deliveries(engine, id=checked, failed=bool(failed), limit=limit)


def parse_time(value: object) -> datetime.datetime:
    """An ISO 8601 time (a naive one is UTC), or a duration back from now: 30m, 2h, 7d."""
    if isinstance(value, datetime.datetime):
        return value if value.tzinfo else value.replace(tzinfo=datetime.UTC)
    if not isinstance(value, str) or not value.strip():
        raise EndpointError("the time is ISO 8601 (2026-01-31T12:00:00Z) or a duration back from now (30m, 2h, 7d)")
    text = value.strip()
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    if text[-1:] in units and text[:-1].isdigit() and len(text) < 12:
        return datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=int(text[:-1]) * units[text[-1]])
    try:
        parsed = datetime.datetime.fromisoformat(text)
    except ValueError:
        raise EndpointError(f"{text[:40]!r} is not a time: give ISO 8601 (2026-01-31T12:00:00Z) or a duration back "
                            "from now (30m, 2h, 7d)") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=datetime.UTC)


def replay(engine: sa.Engine, endpoint_id: object, *, since: object = None,
           failed_only: bool = False) -> queries.Replayed:
    """Queue again the endpoint's deliveries: of every matching event since `since` (creating those it never had),
    or with `failed_only` those whose retries ran out (since `since` if given). One statement (replay_endpoint.sql).
    """
    checked = check_id(endpoint_id)
    if since is None and not failed_only:
        raise EndpointError("give a time to replay the events since (--since, \"since\") or only the failed deliveries "
                            "(--failed-only, \"failed_only\")")
    when = parse_time(since) if since is not None else None
    result = queries.replay_endpoint(engine, id=checked, since=when, failed_only=bool(failed_only))
    if not result.found:
        raise EndpointNotFound(checked)
    return result


@dataclass(frozen=True, slots=True)
class Listener:
    """The endpoint `wa-outbox events listen` receives as, and the secret it verifies with (never printed)."""
    endpoint_id: str
    secret: str
    created: bool   # False: an endpoint registered for this URL before, reused
    enabled: bool   # True: it was disabled (e.g. failing while nothing listened) and is enabled again


def listener(engine: sa.Engine, settings: Settings, url: str) -> Listener:
    """The endpoint for a development receiver at `url`: the one registered for it (enabled again if it was
    disabled: something listens now), or a new one for every event type."""
    if not settings.endpoints_allow_private:
        raise EndpointError(f"{url} is a local address: set WA_OUTBOX_ENDPOINTS_ALLOW_PRIVATE=true (`wa-outbox dev` "
                            "does), or give --secret of an endpoint registered for it")
    box = SecretBox.of(settings, "an endpoint's signing secret")
    found = queries.endpoint_secret_by_url(engine, url=url)
    if found is None:
        made = add(engine, settings, url=url, description="wa-outbox events listen")
        return Listener(made.endpoint.id, made.secret, created=True, enabled=False)
    was_disabled = found.state == EndpointState.DISABLED
    if was_disabled:
        enable(engine, found.id)
    return Listener(found.id, box.decrypt(found.secret_enc), created=False, enabled=was_disabled)
