"""Configuration from environment variables, validated once at start-up.

Every process (web, worker, CLI) builds one `Settings` from the environment. A missing or malformed variable raises
`ConfigError` whose message is one line naming the variable and what is wrong with it; entry points print it and
exit with status 2 instead of showing a traceback. Secrets never appear in `repr()` and so never in logs, nor in a
ConfigError: a variable that can hold a secret (tokens, secrets, URLs with credentials) is named without its value,
or, for a URL, shown with its password replaced by ***.
"""

from __future__ import annotations

import base64
import importlib.util
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Literal, TypeVar
from urllib.parse import unquote, urlsplit

from .delivery_policy import DEFAULT_DISABLE_AFTER_DAYS, DEFAULT_SCHEDULE, DeliveryPolicy
from .retry import RetryPolicy

DEFAULT_GRAPH_API_BASE_URL = "https://graph.facebook.com/v23.0"  # pinned: the version of the spec we test against
# The API token `wa-outbox dev` uses when WA_OUTBOX_API_TOKENS is not set: public (it is in this file), for a machine
# of one's own only; the ops login page names it when WA_OUTBOX_DEV is on and it is configured.
DEV_API_TOKEN = "dev-api-token-0123456789"

T = TypeVar("T")


class ConfigError(Exception):
    """A configuration problem; str(error) is a one-line message naming the variable."""


class _Invalid(ValueError):
    """A converter's explanation of what is wrong with a value; it never quotes a secret."""


def _parse(env: Mapping[str, str], name: str, default: T, convert: Callable[[str], T], what: str,
           shown: Callable[[str], str | None] = repr) -> T:
    """`convert(env[name])`, or `default` when unset. `shown(raw)` is how the bad value appears in the error: None
    for a variable holding secrets (the message then names the variable only)."""
    raw = env.get(name, "").strip()
    if raw == "":
        return default
    try:
        return convert(raw)
    except (TypeError, ValueError) as exc:
        value = shown(raw)
        problem = f": {exc}" if isinstance(exc, _Invalid) else ""
        subject = name if value is None else f"{name}={value}"
        raise ConfigError(f"{subject} is not valid{problem}: expected {what}") from None


def _secret(raw: str) -> None:
    return None


# A password may hold characters a URL parser reads as structure ('@', '/', '?', '#', '[', ']'), and each parser
# (libpq, urllib, SQLAlchemy) splits such a URL differently: libpq ends the user information at the first '@' or '/',
# urllib at the first '/', '?' or '#'. What redacts and scrubs a URL must therefore hide everything any of them could
# read as the password: the most generous reading is that the user information runs to the last '@'.
_MASK = "***"
# A run of this many characters of a secret is masked wherever it appears in a message (a driver may quote a piece
# of a misparsed password: libpq reading "host 'ss3@127.0.0.1'" out of an unencoded '@'); shorter runs are too
# common to mask (they are digits of ports and letters of host names).
_MASKED_RUN = 4


def _userinfo(url: str) -> tuple[str, str, str] | None:
    """(scheme, user information, host and the rest) of `url` by the generous reading, or None when it is not
    scheme://…. The user information is '' when there is no '@'."""
    scheme, sep, rest = url.partition("://")
    if not sep or not re.fullmatch(r"[A-Za-z][A-Za-z0-9+.-]*", scheme):
        return None
    userinfo, _, hostpart = rest.rpartition("@")
    return scheme, userinfo, hostpart


def _url_secrets(url: str) -> set[str]:
    """Every string of `url` that is, or could be read as, a password: in the user information (raw and decoded, by
    the generous reading and by libpq's) and in `password=` query parameters."""
    secrets: set[str] = set()
    split = _userinfo(url)
    if split and ":" in split[1]:
        generous = split[1].split(":", 1)[1]
        libpq = re.split(r"[@/]", generous, maxsplit=1)[0]
        # What libpq takes for the host or path after an unencoded '@' or '/': the password's tail.
        tail = generous[len(libpq) + 1:].split("@")[0].split("/")[0]
        # Up to each '@': the password when the '@'s after it belong to the host or the query (an '@' in the
        # password itself, unencoded, leaves any of them the separator).
        parts = generous.split("@")
        before_ats = {"@".join(parts[:i]) for i in range(1, len(parts))}
        secrets |= {generous, libpq, *before_ats, *([tail] if len(tail) >= 3 else [])}
    for match in re.finditer(r"(?i)[?&]password=([^&]*)", url):
        secrets.add(match.group(1))
    return {form for secret in secrets for form in (secret, unquote(secret)) if form}


def redact_url(url: str) -> str:
    """`url` with its password (in the user information or a `password=` query parameter) replaced by ***: fit for a
    log or an error message, whatever the URL holds (it never raises). Anything that does not read as scheme://… is
    replaced entirely."""
    split = _userinfo(url)
    if split is None:
        return _MASK
    scheme, userinfo, hostpart = split
    if ":" in userinfo:
        userinfo = userinfo.split(":", 1)[0] + ":" + _MASK
    hostpart = re.sub(r"(?i)([?&]password=)[^&]*", r"\1" + _MASK, hostpart)
    return f"{scheme}://{userinfo}@{hostpart}" if userinfo else f"{scheme}://{hostpart}"


def _shown_url(raw: str) -> str | None:
    redacted = redact_url(raw)
    return None if redacted == _MASK else repr(redacted)


def scrub(message: str, url: str | None) -> str:
    """`message` (say, a driver's error) without `url`'s password: the URL itself is replaced by its redacted form, and
    each password (raw or percent-decoded, however a parser could have split it) and every run of 4 or more of its
    characters by ***. libpq quotes the offending part of a URL, which may be the password or a piece of it."""
    if not url:
        return message
    message = message.replace(url, redact_url(url))
    secrets = _url_secrets(url)
    for secret in sorted(secrets, key=len, reverse=True):
        message = message.replace(secret, _MASK)
    return _mask_runs(message, secrets)


def _mask_runs(message: str, secrets: set[str]) -> str:
    """`message` with every run of `_MASKED_RUN` or more characters that appears in one of `secrets` masked."""
    n = _MASKED_RUN
    windows = {s[i:i + n] for s in secrets for i in range(len(s) - n + 1)} - {_MASK[0] * n}
    if not windows:
        return message
    hidden = [False] * len(message)
    for i in range(len(message) - n + 1):
        if message[i:i + n] in windows:
            hidden[i:i + n] = [True] * n
    out, i = [], 0
    while i < len(message):
        if hidden[i]:
            while i < len(message) and hidden[i]:
                i += 1
            out.append(_MASK)
        else:
            out.append(message[i])
            i += 1
    return "".join(out)


def _positive_int(raw: str) -> int:
    value = int(raw)
    if value <= 0:
        raise ValueError
    return value


def _niceness(raw: str) -> int:
    value = int(raw)
    if not 0 <= value <= 19:
        raise ValueError
    return value


def _non_negative_int(raw: str) -> int:
    value = int(raw)
    if value < 0:
        raise ValueError
    return value


def _positive_float(raw: str) -> float:
    value = float(raw)
    if not value > 0 or value != value or value == float("inf"):
        raise ValueError
    return value


def _non_negative_float(raw: str) -> float:
    value = float(raw)
    if not value >= 0 or value == float("inf"):
        raise ValueError
    return value


def _log_level(raw: str) -> str:
    level = raw.upper()
    if level not in {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}:
        raise ValueError
    return level


def _http_url(raw: str) -> str:
    parts = urlsplit(raw)
    if parts.scheme not in {"http", "https"} or not parts.netloc:
        raise ValueError
    return raw.rstrip("/")


def _phone_number_id(raw: str) -> str:
    if not re.fullmatch(r"[0-9]{1,32}", raw):
        raise ValueError
    return raw


def _tokens(raw: str) -> tuple[str, ...]:
    tokens = tuple(t.strip() for t in raw.split(",") if t.strip())
    if not tokens:
        raise _Invalid("no token")
    short = [i for i, t in enumerate(tokens, 1) if len(t) < 16]
    if short:  # positions, never the tokens themselves
        raise _Invalid(f"token{'s' if len(short) > 1 else ''} {', '.join(map(str, short))} of {len(tokens)} "
                         f"{'are' if len(short) > 1 else 'is'} shorter than 16 characters")
    return tokens


def _fernet_keys(raw: str) -> tuple[str, ...]:
    """Each key is 32 bytes in URL-safe base64, as cryptography's Fernet.generate_key() writes it (checked here,
    without importing cryptography, so that every process fails at start on a malformed key)."""
    keys = tuple(k.strip() for k in raw.split(",") if k.strip())
    if not keys:
        raise _Invalid("no key")
    for i, key in enumerate(keys, 1):
        try:
            ok = len(base64.urlsafe_b64decode(key.encode("ascii"))) == 32 and len(key) == 44
        except (ValueError, UnicodeEncodeError):
            ok = False
        if not ok:  # its position, never the key
            raise _Invalid(f"key {i} of {len(keys)} is not 32 bytes of URL-safe base64")
    return keys


def normalize_database_url(raw: str) -> str:
    """Accept Heroku's `postgres://` and SQLAlchemy-style URLs; return a plain `postgresql://` libpq URL that libpq
    can parse (ValueError, with libpq's complaint minus the password, otherwise)."""
    scheme, sep, rest = raw.partition("://")
    if not sep or scheme not in {"postgres", "postgresql", "postgresql+psycopg", "postgresql+psycopg2"}:
        raise ValueError
    url = "postgresql://" + rest
    userinfo = rest.rpartition("@")[0]
    # libpq would end the user information at the first '@' or '/', taking the rest of the password for the host.
    if "@" in userinfo or ("/" in userinfo and ":" in userinfo):
        raise _Invalid("the user or password holds an '@' or '/' that is not percent-encoded (write %40, %2F)")
    # libpq's own parser, no connection made
    from psycopg import ProgrammingError, conninfo  # noqa: PLC0415 - importing config must not import psycopg (slow)
    try:
        params = conninfo.conninfo_to_dict(url)
    except ProgrammingError as exc:
        # Scrubbed whole, then its first line: a line break inside the URL must not cut a password out of reach.
        raise _Invalid((scrub(str(exc), url).strip().splitlines() or ["libpq cannot parse it"])[0]) from None
    except UnicodeDecodeError:  # libpq decoded a %XX sequence that is no UTF-8 (psycopg then cannot read it back)
        raise _Invalid("a percent-encoded byte sequence is not UTF-8") from None
    if not all(p.strip().isdigit() for p in str(params.get("port") or "5432").split(",")):
        raise _Invalid("the port is not a number")  # libpq would only say so when connecting
    return url


# Connections per web process when WA_OUTBOX_DB_POOL_SIZE is unset: the webhook receiver needs one (its POSTs share
# each INSERT), the API one per concurrent request; small Postgres plans allow ~20 connections in all.
DEFAULT_WEB_POOL_SIZE = 4


@dataclass(frozen=True)
class Settings:
    database_url: str | None = field(default=None, repr=False)  # in repr() without its password
    access_token: str | None = field(default=None, repr=False)
    app_secret: str | None = field(default=None, repr=False)
    verify_token: str | None = field(default=None, repr=False)
    api_tokens: tuple[str, ...] = field(default=(), repr=False)
    phone_number_id: str | None = None
    api_base_url: str = DEFAULT_GRAPH_API_BASE_URL
    rate_limit_mps: float = 80.0
    port: int = 8000
    log_level: str = "INFO"
    webhook_max_bytes: int = 6 * 1024 * 1024  # Meta sends up to 3 MB; twice that for margin
    web_concurrency: int = 2
    # Webhook POSTs waiting for a commit are coalesced into the next INSERT (webhook_store.py): more threads, more
    # POSTs per commit (the commit's flush, not the CPU, bounded it at 4: bench/webhooks.py).
    web_threads: int = 16
    # a request's head and body must arrive within this many seconds of its first byte, else 408 (gunicorn_worker.py)
    request_read_timeout: float = 10.0     # seconds for a request's head and body to arrive (the web's worker: 408)
    db_pool_size: int = 0  # 0: one per thread, at most DEFAULT_WEB_POOL_SIZE
    # False: psycopg prepares no statement on the server (PgBouncer in transaction mode before 1.21: db.connect_options)
    db_prepared_statements: bool = True
    data_dir: str = ".wa-outbox"
    # worker
    worker_concurrency: int = 16          # sends in flight per worker process (threads)
    worker_nice: int = 0                  # the worker's niceness; 10: the web first on shared CPUs (_priority.py)
    poll_interval: float = 1.0            # seconds between polls when no NOTIFY arrives
    listen: bool = True                   # False: no LISTEN, polling only (PgBouncer in transaction mode)
    lease_seconds: float = 60.0           # a claimed row belongs to its worker this long
    connect_timeout: float = 5.0
    send_timeout: float = 15.0            # read timeout of a send; past it the outcome is unknown
    shutdown_grace: float = 25.0          # SIGTERM: finish in-flight sends within this (Heroku kills at 30 s)
    retry_base_seconds: float = 2.0
    retry_max_seconds: float = 900.0
    max_attempts: int = 10                # attempts before a message or inbound event goes dead
    unknown_window_seconds: float = 600.0  # wait this long for a status webhook to settle an unknown send
    unknown_policy: str = "resend"         # then: resend (if webhooks are arriving) or dead
    inbound_handlers: tuple[str, ...] = ()  # dotted paths "module:function", called with each inbound event
    dry_run: bool = False                  # accept every send without calling Meta (staging, benchmarks)
    validate: str = "off"                  # "meta": refuse at enqueue what Meta's schema refuses (meta_schema.py)
    # operations
    metrics_token: str | None = field(default=None, repr=False)  # when set, /metrics needs it as a bearer token
    trusted_proxies: int = 0               # proxies in front that append to X-Forwarded-For (default 1 on Heroku)
    auth_failure_burst: int = 10           # wrong tokens one client may send at once (/ops/login and /v1) ...
    auth_failures_per_minute: float = 6.0  # ... and at this rate after that; beyond: 429 with Retry-After
    worker_metrics_port: int | None = None  # a worker also serves its own /metrics on this port
    log_format: str | None = None          # json or console; None: console on a terminal, else json
    # per recipient
    pair_rate_seconds: float = 6.0         # one message per this many seconds to one recipient after the burst (0: off)
    pair_burst: int = 3                    # messages one recipient may get at once
    service_window: str = "off"            # enforce: non-template messages outside the 24-hour window go dead
    # Fernet keys (comma-separated, the first encrypts) for the secrets stored in Postgres (secret_box.py)
    secret_keys: tuple[str, ...] = field(default=(), repr=False)
    # pushes to endpoints (worker/_deliverer.py, delivery_policy.py)
    delivery_concurrency: int = 8          # deliveries in flight per worker process (their own threads)
    delivery_per_endpoint: int = 4         # of which at most this many to one endpoint (a dead one cannot take all)
    delivery_timeout: float = 15.0         # seconds for an endpoint to answer; past it the attempt failed
    delivery_nice: int = 10                # the delivery threads' niceness: the web and the sends first (_priority.py)
    delivery_schedule: tuple[float, ...] = DEFAULT_SCHEDULE  # seconds before each retry; then the delivery is failed
    endpoint_disable_after_days: float = DEFAULT_DISABLE_AFTER_DAYS  # failing continuously this long: disabled
    endpoints_allow_private: bool = False  # true: http and loopback/private addresses allowed (development, tests)
    event_retention_days: int = 30         # events for apps (the feed) are kept this long (`wa-outbox prune`)
    # `wa-outbox dev` sets it for the processes it starts: the ops login page then says which token to use
    dev: bool = False
    # media (media_store.py, worker/_media.py)
    media_store: str = "postgres"          # where media bytes live: postgres, or s3://bucket/prefix
    media_max_bytes: int | None = None     # a media file larger is refused (too_large); None: the store's default
    media_concurrency: int = 4             # inbound media downloads in flight per worker process
    media_retention_days: int = 30         # media (rows and bytes) are kept this long (`wa-outbox prune`)

    def __repr__(self) -> str:
        shown = [f"database_url={None if self.database_url is None else redact_url(self.database_url)!r}"]
        shown += [f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr]
        return f"Settings({', '.join(shown)})"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings:
        env = os.environ if env is None else env
        return cls(
            database_url=_parse(env, "DATABASE_URL", None, normalize_database_url,
                                "a postgres:// or postgresql:// URL", shown=_shown_url),
            access_token=env.get("WHATSAPP_ACCESS_TOKEN", "").strip() or None,
            app_secret=env.get("WHATSAPP_APP_SECRET", "").strip() or None,
            verify_token=env.get("WHATSAPP_VERIFY_TOKEN", "").strip() or None,
            api_tokens=_parse(env, "WA_OUTBOX_API_TOKENS", (), _tokens,
                              "a comma-separated list of tokens of at least 16 characters each", shown=_secret),
            phone_number_id=_parse(env, "WHATSAPP_PHONE_NUMBER_ID", None, _phone_number_id,
                                   "the numeric phone number id from Meta's App Dashboard"),
            api_base_url=_parse(env, "WHATSAPP_API_BASE_URL", DEFAULT_GRAPH_API_BASE_URL, _http_url,
                                "an http(s) URL such as https://graph.facebook.com/v23.0", shown=_shown_url),
            rate_limit_mps=_parse(env, "WA_OUTBOX_RATE_LIMIT_MPS", 80.0, _positive_float,
                                  "a positive number of messages per second"),
            port=_parse(env, "PORT", 8000, _port, "a TCP port number (1-65535)"),
            log_level=_parse(env, "LOG_LEVEL", "INFO", _log_level, "DEBUG, INFO, WARNING, ERROR or CRITICAL"),
            webhook_max_bytes=_parse(env, "WA_OUTBOX_WEBHOOK_MAX_BYTES", 6 * 1024 * 1024, _positive_int,
                                     "a positive number of bytes"),
            web_concurrency=_parse(env, "WEB_CONCURRENCY", 2, _positive_int, "a positive number of processes"),
            web_threads=_parse(env, "WA_OUTBOX_WEB_THREADS", 16, _positive_int, "a positive number of threads"),
            request_read_timeout=_parse(env, "WA_OUTBOX_REQUEST_READ_TIMEOUT", 10.0, _positive_float,
                                        "a positive number of seconds, e.g. 10"),
            db_pool_size=_parse(env, "WA_OUTBOX_DB_POOL_SIZE", 0, _positive_int, "a positive number of connections"),
            db_prepared_statements=_parse(env, "WA_OUTBOX_DB_PREPARED_STATEMENTS", True, _bool,
                                          "true or false (false behind PgBouncer in transaction mode before 1.21)"),
            data_dir=env.get("WA_OUTBOX_DATA_DIR", "").strip() or ".wa-outbox",
            worker_concurrency=_parse(env, "WA_OUTBOX_WORKER_CONCURRENCY", 16, _positive_int,
                                      "a positive number of concurrent sends"),
            worker_nice=_parse(env, "WA_OUTBOX_WORKER_NICE", 0, _niceness,
                               "a niceness from 0 to 19 (0, the default: the web's priority)"),
            poll_interval=_parse(env, "WA_OUTBOX_POLL_INTERVAL", 1.0, _positive_float, "seconds, e.g. 1.0"),
            listen=_parse(env, "WA_OUTBOX_LISTEN", True, _bool,
                          "true or false (false behind PgBouncer in transaction mode: polling only)"),
            lease_seconds=_parse(env, "WA_OUTBOX_LEASE_SECONDS", 60.0, _positive_float, "seconds, e.g. 60"),
            connect_timeout=_parse(env, "WA_OUTBOX_CONNECT_TIMEOUT", 5.0, _positive_float, "seconds"),
            send_timeout=_parse(env, "WA_OUTBOX_SEND_TIMEOUT", 15.0, _positive_float, "seconds"),
            shutdown_grace=_parse(env, "WA_OUTBOX_SHUTDOWN_GRACE", 25.0, _positive_float, "seconds"),
            retry_base_seconds=_parse(env, "WA_OUTBOX_RETRY_BASE_SECONDS", 2.0, _positive_float, "seconds"),
            retry_max_seconds=_parse(env, "WA_OUTBOX_RETRY_MAX_SECONDS", 900.0, _positive_float, "seconds"),
            max_attempts=_parse(env, "WA_OUTBOX_MAX_ATTEMPTS", 10, _positive_int, "a positive number of attempts"),
            unknown_window_seconds=_parse(env, "WA_OUTBOX_UNKNOWN_WINDOW_SECONDS", 600.0, _positive_float,
                                          "seconds"),
            unknown_policy=_parse(env, "WA_OUTBOX_UNKNOWN_POLICY", "resend", _policy, "resend or dead"),
            inbound_handlers=_parse(env, "WA_OUTBOX_INBOUND_HANDLERS", (), _handlers,
                                    "comma-separated dotted paths such as myapp.whatsapp:on_event"),
            dry_run=_parse(env, "WA_OUTBOX_DRY_RUN", False, _bool, "true or false"),
            validate=validate_mode(env),
            metrics_token=_parse(env, "WA_OUTBOX_METRICS_TOKEN", None, _token, "a token of at least 16 characters",
                                 shown=_secret),
            # Heroku's router, on a dyno (it sets DYNO): the X-Forwarded-For entry it appends is the client's.
            trusted_proxies=_parse(env, "WA_OUTBOX_TRUSTED_PROXIES", 1 if env.get("DYNO") else 0, _non_negative_int,
                                   "the number of proxies in front of the web process (0: none, 1: Heroku's router)"),
            auth_failure_burst=_parse(env, "WA_OUTBOX_AUTH_FAILURE_BURST", 10, _positive_int,
                                      "a positive number of wrong tokens one client may send at once"),
            auth_failures_per_minute=_parse(env, "WA_OUTBOX_AUTH_FAILURES_PER_MINUTE", 6.0, _positive_float,
                                            "a positive number of wrong tokens per minute, e.g. 6"),
            worker_metrics_port=_parse(env, "WA_OUTBOX_WORKER_METRICS_PORT", None, _port,
                                       "a TCP port number (1-65535)"),
            log_format=_parse(env, "LOG_FORMAT", None, _log_format, "json or console"),
            pair_rate_seconds=_parse(env, "WA_OUTBOX_PAIR_RATE_SECONDS", 6.0, _non_negative_float,
                                     "seconds between two messages to one recipient, e.g. 6 (0: no pacing)"),
            pair_burst=_parse(env, "WA_OUTBOX_PAIR_BURST", 3, _positive_int,
                              "a positive number of messages one recipient may get at once"),
            service_window=_parse(env, "WA_OUTBOX_SERVICE_WINDOW", "off", _service_window, "off or enforce"),
            secret_keys=_parse(env, "WA_OUTBOX_SECRET_KEY", (), _fernet_keys,
                               "Fernet keys, comma-separated (the first encrypts): `wa-outbox secrets generate-key`",
                               shown=_secret),
            delivery_concurrency=_parse(env, "WA_OUTBOX_DELIVERY_CONCURRENCY", 8, _positive_int,
                                        "a positive number of concurrent deliveries to endpoints"),
            delivery_per_endpoint=_parse(env, "WA_OUTBOX_DELIVERY_PER_ENDPOINT", 4, _positive_int,
                                         "a positive number of concurrent deliveries to one endpoint"),
            delivery_timeout=_parse(env, "WA_OUTBOX_DELIVERY_TIMEOUT", 15.0, _positive_float, "seconds, e.g. 15"),
            delivery_nice=_parse(env, "WA_OUTBOX_DELIVERY_NICE", 10, _niceness,
                                 "a niceness from 0 to 19 (10, the default: deliveries after the web and the sends)"),
            delivery_schedule=_parse(env, "WA_OUTBOX_DELIVERY_SCHEDULE", DEFAULT_SCHEDULE, _schedule,
                                     "comma-separated seconds before each retry, e.g. 5,300,1800,7200"),
            endpoint_disable_after_days=_parse(env, "WA_OUTBOX_ENDPOINT_DISABLE_AFTER_DAYS",
                                               DEFAULT_DISABLE_AFTER_DAYS, _positive_float, "days, e.g. 5"),
            endpoints_allow_private=_parse(env, "WA_OUTBOX_ENDPOINTS_ALLOW_PRIVATE", False, _bool,
                                           "true or false (true: http and private addresses, for development)"),
            event_retention_days=_parse(env, "WA_OUTBOX_EVENT_RETENTION_DAYS", 30, _positive_int,
                                        "a positive number of days, e.g. 30"),
            dev=_parse(env, "WA_OUTBOX_DEV", False, _bool, "true or false (`wa-outbox dev` sets it)"),
            media_store=_parse(env, "WA_OUTBOX_MEDIA_STORE", "postgres", _media_store,
                               "postgres, or s3://bucket/prefix"),
            media_max_bytes=_parse(env, "WA_OUTBOX_MEDIA_MAX_BYTES", None, _positive_int,
                                   "a positive number of bytes, e.g. 16777216"),
            media_concurrency=_parse(env, "WA_OUTBOX_MEDIA_CONCURRENCY", 4, _positive_int,
                                     "a positive number of concurrent media downloads"),
            media_retention_days=_parse(env, "WA_OUTBOX_MEDIA_RETENTION_DAYS", 30, _positive_int,
                                        "a positive number of days, e.g. 30"),
        )

    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(self.retry_base_seconds, self.retry_max_seconds, self.max_attempts)

    def delivery_policy(self) -> DeliveryPolicy:
        return DeliveryPolicy(self.delivery_schedule, self.endpoint_disable_after_days)

    def require(self, *names: str) -> Settings:
        """Raise ConfigError for the first of the named settings that is unset (the process's role needs it)."""
        for name in names:
            if not getattr(self, name):
                raise _unset(name)
        return self

    def required(self, name: RequiredText) -> str:
        """The value of a setting the caller's role requires (require_web, require_worker): ConfigError when it is
        unset, as require() says it."""
        value = getattr(self, name)
        if not value:
            raise _unset(name)
        return value

    def require_web(self, *, apps_registered: bool = False) -> Settings:
        """The web's settings. `apps_registered`: the caller checks, where it has an engine, that WHATSAPP_APP_SECRET
        is set or an app is registered (registry_watch.py), so it is not required here; WA_OUTBOX_SECRET_KEY is,
        without it (the /ops session key derives from it then, and a registered app's secret is decrypted with it)."""
        self.require("database_url")
        if not self.app_secret and not (apps_registered and self.secret_keys):
            raise ConfigError(NO_WEBHOOK_SECRET)
        return self.require("verify_token", "api_tokens")

    def require_worker(self, *, senders_registered: bool = False) -> Settings:
        """The worker's settings. WHATSAPP_ACCESS_TOKEN and WHATSAPP_PHONE_NUMBER_ID are needed only while no sender
        is registered: the worker asks the database (Worker.require_credentials) once it has its engine."""
        self.require("database_url")
        if not senders_registered:
            for name in ("access_token", "phone_number_id"):
                if not getattr(self, name):
                    var, why = _REQUIRED_HELP[name]
                    raise ConfigError(f"{var} is not set and no sender is registered: set {var} ({why}), or register "
                                      "senders with `wa-outbox senders add`")
        if self.lease_seconds <= self.connect_timeout + self.send_timeout + 5:
            raise ConfigError(f"WA_OUTBOX_LEASE_SECONDS={self.lease_seconds:g} must exceed "
                              f"WA_OUTBOX_CONNECT_TIMEOUT + WA_OUTBOX_SEND_TIMEOUT + 5 s "
                              f"({self.connect_timeout + self.send_timeout + 5:g}), or live sends would be rescued")
        return self


VALIDATE_ENV = "WA_OUTBOX_VALIDATE"
VALIDATE_MODES = ("off", "meta")


def validate_mode(env: Mapping[str, str]) -> str:
    """WA_OUTBOX_VALIDATE: `off` or `meta`, checked at start-up (`meta` needs jsonschema); enqueue reads the same
    variable through meta_schema.mode(). The checker module is imported, never meta_schema (which imports this)."""
    raw = env.get(VALIDATE_ENV, "").strip().lower() or "off"
    if raw not in VALIDATE_MODES:
        raise ConfigError(f"{VALIDATE_ENV}={raw!r} is not valid: expected off or meta")
    if raw == "meta":
        try:
            from .meta_validation import RequestChecker  # noqa: F401, PLC0415 - only whether jsonschema imports
        except ImportError as exc:
            raise ConfigError(f"{VALIDATE_ENV}=meta needs the jsonschema package ({exc.name} is not installed): "
                              "pip install 'wa-outbox[simulator]', or set WA_OUTBOX_VALIDATE=off") from None
    return raw


def _media_store(raw: str) -> str:
    """WA_OUTBOX_MEDIA_STORE: `postgres`, or `s3://bucket[/prefix]` (media_store.py parses the same form)."""
    if raw.lower() == "postgres":
        return "postgres"
    match = re.fullmatch(r"s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(/[^?#]*)?", raw)
    if match is None:
        raise _Invalid("neither postgres nor s3://bucket/prefix")
    if importlib.util.find_spec("boto3") is None:  # found, not imported: a second of start-up only where it is used
        raise _Invalid("a bucket needs boto3, which is not installed: pip install 'wa-outbox[s3]'")
    return raw


def _token(raw: str) -> str:
    if len(raw) < 16:
        raise _Invalid("shorter than 16 characters")
    return raw


def _log_format(raw: str) -> str:
    if raw.lower() not in ("json", "console"):
        raise ValueError
    return raw.lower()


def _policy(raw: str) -> str:
    if raw not in ("resend", "dead"):
        raise ValueError
    return raw


def _service_window(raw: str) -> str:
    if raw.lower() not in ("off", "enforce"):
        raise ValueError
    return raw.lower()


def _handlers(raw: str) -> tuple[str, ...]:
    paths = tuple(p.strip() for p in raw.split(",") if p.strip())
    if not all(re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", p) for p in paths):
        raise ValueError
    return paths


def _schedule(raw: str) -> tuple[float, ...]:
    return tuple(_non_negative_float(part) for part in raw.split(","))


def _bool(raw: str) -> bool:
    lowered = raw.lower()
    if lowered not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
        raise ValueError
    return lowered in ("1", "true", "yes", "on")


def _port(raw: str) -> int:
    value = int(raw)
    if not 1 <= value <= 65535:
        raise ValueError
    return value


# Neither way for the web to verify webhook signatures: the environment's app secret, or a registered app's.
NO_WEBHOOK_SECRET = ("WHATSAPP_APP_SECRET is not set and no Meta app is registered: set WHATSAPP_APP_SECRET, or set "
                     "WA_OUTBOX_SECRET_KEY and register an app (`wa-outbox apps add APP_ID --secret-env VAR`)")

# The text settings some role requires (unset: None), by field name: what Settings.required() reads.
RequiredText = Literal["database_url", "access_token", "app_secret", "verify_token", "phone_number_id"]


def _unset(name: str) -> ConfigError:
    var, why = _REQUIRED_HELP[name]
    return ConfigError(f"{var} is not set: {why}")


_REQUIRED_HELP = {
    "database_url": ("DATABASE_URL", "the Postgres URL (the `wa-outbox` CLI starts an embedded one when unset)"),
    "access_token": ("WHATSAPP_ACCESS_TOKEN", "the Cloud API access token the worker sends with"),
    "app_secret": ("WHATSAPP_APP_SECRET", "the Meta app secret that signs webhooks"),
    "verify_token": ("WHATSAPP_VERIFY_TOKEN", "the token Meta echoes in the webhook verification handshake"),
    "api_tokens": ("WA_OUTBOX_API_TOKENS", "bearer tokens for /v1 and /ops (comma-separated, 16+ characters each)"),
    "phone_number_id": ("WHATSAPP_PHONE_NUMBER_ID", "the default sender's phone number id"),
}
