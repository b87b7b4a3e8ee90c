"""The simulator's run-time knobs: where status webhooks go and how they misbehave, and Meta's throughput limits.

One immutable `SimulatorConfig`; a change (`PUT /_admin/config`, `SimulatorServer.configure`) builds a new one and
swaps the reference, so a request in flight always sees one consistent configuration without taking a lock.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

FINAL_STATUSES = ("sent", "delivered", "read")


@dataclass(frozen=True)
class PairLimit:
    """At most `messages` accepted sends to one recipient within `window_s` seconds, else 131056."""
    messages: int
    window_s: float


@dataclass(frozen=True)
class App:
    """A Meta app: its secret signs the webhooks of the numbers it owns."""
    secret: str = field(repr=False)


@dataclass(frozen=True)
class Number:
    """A business number of its own: it accepts only its own token (None: revoked, none is accepted), and its
    webhooks name its WABA and are signed by its app's secret."""
    token: str | None = field(repr=False)
    app: str | None = None                   # an `apps` key; None: the simulator's own app secret
    waba: str | None = None                  # None: the config's waba_id
    display_phone_number: str | None = None  # None: the config's display_phone_number


@dataclass(frozen=True)
class Portfolio:
    """A business portfolio: the business accounts (WABA ids) it owns share its messaging limit (None: unlimited)."""
    wabas: tuple[str, ...]
    messaging_limit: int | None = None


@dataclass(frozen=True)
class SimulatorConfig:
    # Status webhooks. Delays are offsets from acceptance, one per step (sent, delivered, read).
    webhook_url: str | None = None
    status_delays_ms: tuple[float, float, float] = (50.0, 100.0, 150.0)
    final_status: str = "read"  # the last status a delivered message reaches: sent | delivered | read
    duplicate_rate: float = 0.0  # chance that a webhook POST is delivered again, byte for byte ...
    duplicate_max: int = 1  # ... 1 to this many more times (Meta's at-least-once delivery repeats itself)
    reorder_rate: float = 0.0  # chance that a message's statuses are posted out of order (e.g. read before sent)
    batch_rate: float = 0.0  # chance that a message's statuses all come in one POST
    webhook_max_batch: int = 1  # statuses waiting for a busy sender may share one POST, up to this many
    webhook_max_attempts: int = 5  # a POST answered with anything but 200 is retried, this many attempts in all
    webhook_retry_ms: float = 100.0  # first retry delay; doubles with each attempt ...
    webhook_retry_max_ms: float | None = None  # ... up to this (None: no cap), so a receiver down a few seconds
    # gets its webhooks soon after it is back (a test's clock), not one doubling later
    webhook_timeout_s: float = 5.0
    # Meta's identity of the business, as it appears in webhooks.
    waba_id: str = "100000000000000"
    display_phone_number: str = "15550000001"
    phone_number_id: str = "100000000000001"  # the business number inbound messages go to unless told otherwise
    # Throughput limits (None: unlimited). mps is per phone_number_id, over a sliding second.
    mps: float | None = None
    pair_limit: PairLimit | None = None
    validate: bool = True  # check request bodies against Meta's schema (off: measure the transport alone)
    # Many numbers and apps (none: one token for every number, one secret, as before). A change merges by key: a
    # number or app given replaces that one, null removes it, the others stay.
    apps: Mapping[str, App] = field(default_factory=dict)
    numbers: Mapping[str, Number] = field(default_factory=dict)
    # Media (simulator/media.py): a download URL from GET /{media-id} works this long (Meta: about 5 minutes).
    media_url_ttl_s: float = 300.0
    # The business portfolio's messaging limit over all its numbers (limits.py MessagingLimit; None: unlimited):
    # unique customers reached with templates outside a service window per moving messaging_limit_window_s. Each of
    # `portfolios` (keyed by portfolio id, merged by key as numbers are) has its own limit over the numbers of its
    # WABAs; `messaging_limit` is the limit of the one portfolio every other number belongs to.
    messaging_limit: int | None = None
    messaging_limit_window_s: float = 86400.0
    portfolios: Mapping[str, Portfolio] = field(default_factory=dict)

    def updated(self, changes: dict[str, Any]) -> SimulatorConfig:
        """A copy with `changes` (JSON-style values) applied; ValueError names the first bad key or value."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ValueError(f"unknown config key(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        values: dict[str, Any] = {name: _merged(getattr(self, name), name, value)
                                  if name in ("apps", "numbers", "portfolios")
                                  else _coerce(name, value) for name, value in changes.items()}
        updated = dataclasses.replace(self, **values)
        for number_id, number in updated.numbers.items():
            if number.app is not None and number.app not in updated.apps:
                raise ValueError(f"number {number_id}'s app {number.app} is not among apps")
        owners: dict[str, str] = {}
        for portfolio_id, portfolio in updated.portfolios.items():
            for waba in portfolio.wabas:
                if owners.setdefault(waba, portfolio_id) != portfolio_id:
                    raise ValueError(f"WABA {waba} is in portfolios {owners[waba]} and {portfolio_id}: a business "
                                     "account belongs to one portfolio")
        return updated

    def portfolio_of(self, phone_number_id: str) -> tuple[str, int | None]:
        """The portfolio a number's messages count against (its WABA's; "" for the default one) and its limit."""
        number = self.numbers.get(phone_number_id)
        waba = number.waba if number is not None and number.waba else self.waba_id
        for portfolio_id, portfolio in self.portfolios.items():
            if waba in portfolio.wabas:
                return portfolio_id, portfolio.messaging_limit
        return "", self.messaging_limit

    def to_dict(self) -> dict[str, Any]:
        """The configuration as JSON, tokens and secrets shown only as whether they are set."""
        shown = dataclasses.asdict(self)
        shown["apps"] = {app_id: {"secret": "***"} for app_id in self.apps}
        shown["numbers"] = {number_id: {**dataclasses.asdict(n), "token": None if n.token is None else "***"}
                            for number_id, n in self.numbers.items()}
        shown["portfolios"] = {pid: {"wabas": list(p.wabas), "messaging_limit": p.messaging_limit}
                               for pid, p in self.portfolios.items()}
        return shown

    def secret_of(self, phone_number_id: str, default: str) -> str:
        """The secret the webhooks of `phone_number_id` are signed with: its app's, else `default`."""
        number = self.numbers.get(phone_number_id)
        return self.apps[number.app].secret if number is not None and number.app is not None else default

    def number(self, phone_number_id: str) -> Number | None:
        return self.numbers.get(phone_number_id)


def _merged(current: Mapping[str, Any], name: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        keyed = {"apps": "app id", "numbers": "phone number id", "portfolios": "portfolio id"}[name]
        raise ValueError(f"{name} must be an object keyed by {keyed}")
    merged = dict(current)
    for key, item in value.items():
        if not isinstance(key, str) or not key.isdigit():
            raise ValueError(f"{name}: {key!r} is not a numeric id")
        if item is None:
            merged.pop(key, None)
        else:
            merged[key] = {"apps": _app, "numbers": _number, "portfolios": _portfolio}[name](key, item)
    return merged


def _app(app_id: str, value: Any) -> App:
    if isinstance(value, App):
        return value
    if not isinstance(value, Mapping) or set(value) != {"secret"} or not isinstance(value["secret"], str) \
            or not value["secret"]:
        raise ValueError(f'apps: {app_id} must be {{"secret": "<the app secret>"}}')
    return App(value["secret"])


def _portfolio(portfolio_id: str, value: Any) -> Portfolio:
    if isinstance(value, Portfolio):
        return value
    wabas = value.get("wabas") if isinstance(value, Mapping) else None
    if not isinstance(value, Mapping) or set(value) - {"wabas", "messaging_limit"} or not isinstance(wabas, list) \
            or not all(isinstance(w, str) and w.isdigit() for w in wabas):
        raise ValueError(f'portfolios: {portfolio_id} must be {{"wabas": ["<WABA id>", …], "messaging_limit"?: N}}')
    return Portfolio(tuple(wabas), _coerce("messaging_limit", value.get("messaging_limit")))


_NUMBER_KEYS = {"token", "app", "waba", "display_phone_number"}


def _number(number_id: str, value: Any) -> Number:
    if isinstance(value, Number):
        return value
    if not isinstance(value, Mapping) or "token" not in value or set(value) - _NUMBER_KEYS:
        raise ValueError(f'numbers: {number_id} must be {{"token": "<its token>" or null, "app"?, "waba"?, '
                         '"display_phone_number"?}')
    for key in _NUMBER_KEYS:
        item = value.get(key)
        if item is not None and (not isinstance(item, str) or not item):
            raise ValueError(f"numbers: {number_id}'s {key} must be a non-empty string or null")
    return Number(value["token"], value.get("app"), value.get("waba"), value.get("display_phone_number"))


def _coerce(name: str, value: Any) -> Any:
    if name == "webhook_url":
        return _optional(value, str, name)
    if name == "status_delays_ms":
        if not isinstance(value, (list, tuple)) or len(value) != 3 or not all(_is_number(v) and v >= 0 for v in value):
            raise ValueError("status_delays_ms must be three non-negative numbers (sent, delivered, read)")
        return tuple(float(v) for v in value)
    if name == "final_status":
        if value not in FINAL_STATUSES:
            raise ValueError(f"final_status must be one of {', '.join(FINAL_STATUSES)}")
        return value
    if name in ("duplicate_rate", "reorder_rate", "batch_rate"):
        if not _is_number(value) or not 0 <= value <= 1:
            raise ValueError(f"{name} must be a number between 0 and 1")
        return float(value)
    if name in ("webhook_max_batch", "webhook_max_attempts", "duplicate_max"):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{name} must be a positive integer")
        return value
    if name == "webhook_retry_max_ms":
        if value is not None and (not _is_number(value) or value <= 0):
            raise ValueError("webhook_retry_max_ms must be a positive number or null")
        return None if value is None else float(value)
    if name in ("webhook_retry_ms", "webhook_timeout_s"):
        if not _is_number(value) or value <= 0:
            raise ValueError(f"{name} must be a positive number")
        return float(value)
    if name in ("waba_id", "display_phone_number", "phone_number_id"):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name} must be a non-empty string")
        return value
    if name == "mps":
        if value is not None and (not _is_number(value) or value <= 0):
            raise ValueError("mps must be a positive number or null")
        return None if value is None else float(value)
    if name == "pair_limit":
        return _pair_limit(value)
    if name == "validate":
        if not isinstance(value, bool):
            raise ValueError("validate must be true or false")
        return value
    if name == "media_url_ttl_s":
        if not _is_number(value) or value < 0:
            raise ValueError("media_url_ttl_s must be a non-negative number of seconds")
        return float(value)
    if name == "messaging_limit":
        if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
            raise ValueError("messaging_limit must be a whole number >= 0 or null (unlimited)")
        return value
    if name == "messaging_limit_window_s":
        if not _is_number(value) or value <= 0:
            raise ValueError("messaging_limit_window_s must be a positive number")
        return float(value)
    raise AssertionError(name)  # every field is handled above


def webhook_retry_delay(config: SimulatorConfig, attempt: int) -> float:
    """Seconds before retrying a webhook POST that failed `attempt` + 1 times: doubling from webhook_retry_ms, capped
    at webhook_retry_max_ms when set."""
    delay_ms = config.webhook_retry_ms * 2 ** attempt
    if config.webhook_retry_max_ms is not None:
        delay_ms = min(delay_ms, config.webhook_retry_max_ms)
    return delay_ms / 1000


def _pair_limit(value: Any) -> PairLimit | None:
    if value is None or isinstance(value, PairLimit):
        return value
    if isinstance(value, dict) and set(value) == {"messages", "window_s"}:
        messages, window = value["messages"], value["window_s"]
        if isinstance(messages, int) and not isinstance(messages, bool) and messages >= 1 \
                and _is_number(window) and window > 0:
            return PairLimit(messages, float(window))
    raise ValueError('pair_limit must be null or {"messages": N >= 1, "window_s": seconds > 0}')


def _optional(value: Any, kind: type, name: str) -> Any:
    if value is not None and not isinstance(value, kind):
        raise ValueError(f"{name} must be a {kind.__name__} or null")
    return value or None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
