"""The media thread of a worker: fetch the media inbound messages carry and keep their bytes.

Each media row (created pending when its message is recorded: record_inbound_messages.sql) is claimed with FOR UPDATE
SKIP LOCKED (claim_media.sql) and fetched on one of WA_OUTBOX_MEDIA_CONCURRENCY threads: `GET /{media-id}` with the
receiving number's token (the registry's, as its sends use) for a fresh URL, then the download with the same token,
streamed (`iter_content`) into the store (media_store.py), a chunk at a time, so a 100 MB document never sits whole
in memory. Size and sha256 are checked against what Meta declared; the row is marked stored and its `media.ready`
emitted in one statement (media_stored.sql), in the transaction that wrote the chunks. What each answer means and
when to try again is media_policy.py's. The lease (WA_OUTBOX_LEASE_SECONDS) is renewed every third of it while the
bytes flow, so a slow download keeps its row and a worker that dies mid-fetch leaves it to the rescuer
(rescue_media.sql) within a lease; a fetch is repeatable.

A download URL is a bearer credential for minutes: it is never stored, logged, or put in an error (a failure of
requests names the URL, so only its exception's class is kept).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import requests
import sqlalchemy as sa

from .. import db, media_policy, media_store, queries
from ..config import ConfigError, Settings, scrub
from ..logs import one_line
from ..media_policy import Lookup, MediaState, Verdict
from ..metrics import MediaFetchOutcome, WorkerMetrics
from ..retry import backoff_seconds
from ._tokens import Tokens

log = logging.getLogger("wa_outbox.media")

FAILURE_BACKOFF_CAP = 10.0
RESCUE_LIMIT = 1000



@dataclass
class _Failure:
    verdict: Verdict
    reason: str
    lookup: Lookup | None = None
    corrupt: bool = False


class MediaFetcher:
    def __init__(self, settings: Settings, worker_id: str, metrics: WorkerMetrics, tokens: Tokens, *,
                 engine: sa.Engine | None = None, store: media_store.MediaStore | None = None) -> None:
        self.settings = settings
        self.worker_id = worker_id
        self.metrics = metrics
        self.tokens = tokens
        self.concurrency = settings.media_concurrency
        self.store = store or media_store.from_settings(settings)
        # Its own pool: a Postgres download holds its connection (the chunks' transaction) for the whole download.
        self.engine = engine or db.create_engine(
            settings.required("database_url"), pool_size=self.concurrency, application_name="wa-outbox-media",
            isolation_level="AUTOCOMMIT", prepared_statements=settings.db_prepared_statements)
        self.base_url = settings.api_base_url.rstrip("/")
        self.timeout = (settings.connect_timeout, settings.send_timeout)
        self.session = requests.Session()
        self.session.trust_env = False  # as the sends' transport: no .netrc replacing our token, proxies read once
        self.session.proxies.update(requests.utils.get_environ_proxies(self.base_url))
        ca_bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
        if ca_bundle:
            self.session.verify = ca_bundle
        self.session.headers["User-Agent"] = "wa-outbox"
        self.wake = threading.Event()
        self._lock = threading.Lock()
        self._in_flight = 0
        self._executor = ThreadPoolExecutor(max_workers=self.concurrency, thread_name_prefix="media")
        self.rounds = 0
        self.stats: dict[str, int] = {o.value: 0 for o in MediaFetchOutcome}

    @property
    def in_flight(self) -> int:
        with self._lock:
            return self._in_flight

    # --- the loop (its own thread) -----------------------------------------------------------------------------------

    def run(self, stopping: threading.Event) -> None:
        if isinstance(self.store, media_store.S3Store):
            _ = self.store.client  # boto3 imported and its client made at start, not inside the first download
        failures = 0
        while not stopping.is_set():
            self.wake.clear()
            busy = False
            try:
                free = self.concurrency - self.in_flight
                if free > 0:
                    busy = self.claim(free) == free
                failures = 0
            except Exception as exc:  # noqa: BLE001 - the database is away (or a bug): wait, then go on
                failures += 1
                delay = backoff_seconds(failures, base=self.settings.poll_interval,
                                        cap=max(self.settings.poll_interval, FAILURE_BACKOFF_CAP))
                log.warning("media round failed (%d in a row), next try in %.1f s: %s", failures, delay,
                            scrub(one_line(exc), self.settings.database_url))
                stopping.wait(delay)
                continue
            finally:
                self.rounds += 1
            if not busy:
                self.wake.wait(self.settings.poll_interval)
        self._executor.shutdown(wait=False, cancel_futures=True)

    def claim(self, free: int) -> int:
        rows = queries.claim_media(self.engine, limit=free, worker_id=self.worker_id,
                                   lease_seconds=self.settings.lease_seconds)
        for row in rows:
            with self._lock:
                self._in_flight += 1
            self._executor.submit(self._run_one, row)
        return len(rows)

    def rescue(self) -> int:
        rescued = queries.rescue_media(self.engine, limit=RESCUE_LIMIT)
        if rescued:
            log.warning("rescued %d media fetches from expired leases", len(rescued))
        return len(rescued)

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)
        self.session.close()
        self.engine.dispose()

    # --- one fetch (a media thread) ----------------------------------------------------------------------------------

    def _run_one(self, row: queries.ClaimedMedia) -> None:
        try:
            self.fetch(row)
        except Exception:  # a bug of ours, or the database away: the lease brings the row back
            log.exception("media %s: fetch crashed", row.id)
        finally:
            with self._lock:
                self._in_flight -= 1
            self.wake.set()

    def fetch(self, row: queries.ClaimedMedia) -> str:
        """Fetch one claimed media and record the outcome; returns the state it was left in."""
        if row.phone_number_id is None:
            return self._finish(row, _Failure(Verdict.GONE, "the message names no business number to fetch with"))
        try:
            token = self.tokens.get(row.phone_number_id)
        except ConfigError as exc:
            return self._finish(row, _Failure(Verdict.TOKEN, f"no token to fetch with: {exc}"), pause=False)
        outcome = self._attempt(row, token)
        if isinstance(outcome, _Failure) and outcome.verdict is Verdict.TOKEN:
            fresh = self.tokens.refresh(row.phone_number_id)  # a rotation since the token was read: once more
            if fresh is not None and fresh != token:
                outcome = self._attempt(row, fresh)
        if isinstance(outcome, _Failure):
            return self._finish(row, outcome)
        return outcome

    def _attempt(self, row: queries.ClaimedMedia, token: str) -> _Failure | str:
        """Look up and download; a URL refused is looked up again (URL_RETRIES times) at once."""
        failure: _Failure | None = None
        for _ in range(media_policy.URL_RETRIES + 1):
            lookup = self._lookup(row, token)
            if lookup.verdict is not Verdict.OK:
                return _Failure(lookup.verdict, lookup.reason, lookup)
            result = self._download(row, token, lookup)
            if not (isinstance(result, _Failure) and result.verdict is Verdict.URL_EXPIRED):
                return result
            failure = result
        assert failure is not None
        return _Failure(Verdict.RETRY, failure.reason, failure.lookup)

    def _lookup(self, row: queries.ClaimedMedia, token: str) -> Lookup:
        try:
            response = self.session.get(f"{self.base_url}/{row.meta_media_id}",
                                        params={"phone_number_id": row.phone_number_id},
                                        headers={"Authorization": f"Bearer {token}"}, timeout=self.timeout)
        except requests.RequestException as exc:
            return Lookup(Verdict.RETRY, f"lookup failed: {type(exc).__name__}")
        try:
            body: Any = response.json()
        except ValueError:
            body = None
        return media_policy.judge_lookup(response.status_code, body, self.store.max_bytes)

    def _download(self, row: queries.ClaimedMedia, token: str, lookup: Lookup) -> _Failure | str:
        assert lookup.url is not None
        try:
            response = self.session.get(lookup.url, headers={"Authorization": f"Bearer {token}"}, stream=True,
                                        timeout=self.timeout)
        except requests.RequestException as exc:
            return _Failure(Verdict.RETRY, f"download failed: {type(exc).__name__}", lookup)
        with response:
            verdict = media_policy.judge_download(response.status_code)
            if verdict is not Verdict.OK:
                reason = ("the download URL was refused (expired)" if verdict is Verdict.URL_EXPIRED
                          else f"download answered HTTP {response.status_code}")
                return _Failure(verdict, reason, lookup)
            return self._store(row, lookup, response)

    def _store(self, row: queries.ClaimedMedia, lookup: Lookup, response: requests.Response) -> _Failure | str:
        mime = row.mime_type or lookup.mime_type or response.headers.get("Content-Type")
        conn = self.engine.raw_connection()
        stored: media_store.Stored | None = None
        try:
            pg = db.psycopg_connection(conn)
            try:
                with pg.transaction():
                    stored = self.store.put(pg, row.id, self._chunks(row, response))
                    problem = media_policy.check_bytes(stored.size, stored.sha256, file_size=lookup.file_size,
                                                       declared=[row.declared_sha256, lookup.sha256])
                    if problem is not None:
                        raise _Rollback(_Failure(Verdict.RETRY, problem, lookup, corrupt=True))
                    marked = queries.media_stored(
                        pg, id=row.id, worker_id=self.worker_id, store=stored.store, store_key=stored.store_key,
                        size=stored.size, sha256=stored.sha256, mime_type=mime, declared_size=lookup.file_size,
                        declared_sha256=lookup.sha256)
                    if marked is None:
                        raise _Rollback(None)
            except _LeaseLost:
                log.warning("media %s: lease lost during the download; left to the worker that holds it now", row.id)
                return MediaState.FETCHING.value
            except _Rollback as rollback:
                if stored is not None and stored.store != media_store.PostgresStore.name:
                    self._discard(row, stored)
                if rollback.failure is None:
                    log.warning("media %s: lease lost during the download; left to the worker that holds it now",
                                row.id)
                    return MediaState.FETCHING.value
                return rollback.failure
            except media_store.TooLarge as exc:
                return _Failure(Verdict.TOO_LARGE, str(exc), lookup)
            except (requests.RequestException, OSError) as exc:  # the download broke off mid-way
                return _Failure(Verdict.RETRY, f"download broke off: {type(exc).__name__}", lookup)
        finally:
            conn.close()
        self._count(MediaFetchOutcome.STORED)
        log.info("media %s (%s, %s bytes) stored for message %s", row.id, row.kind, stored.size, row.wamid,
                 extra={"media_id": row.id, "phone_number_id": row.phone_number_id})
        return MediaState.STORED.value

    def _chunks(self, row: queries.ClaimedMedia, response: requests.Response) -> Any:
        """The body as it arrives, CHUNK_BYTES at most at a time, the lease renewed every third of a lease; a body
        that ends early is a broken download."""
        expected = response.headers.get("Content-Length")
        lease = self.settings.lease_seconds
        renew_at = time.monotonic() + lease / 3
        got = 0
        for chunk in response.iter_content(media_store.CHUNK_BYTES):
            got += len(chunk)
            yield chunk
            if time.monotonic() >= renew_at:
                if not queries.renew_media_lease(self.engine, id=row.id, worker_id=self.worker_id,
                                                 lease_seconds=lease):
                    raise _LeaseLost()
                renew_at = time.monotonic() + lease / 3
        if expected is not None and expected.isdigit() and got != int(expected):
            raise requests.exceptions.ChunkedEncodingError(f"{got} of {expected} bytes")

    def _discard(self, row: queries.ClaimedMedia, stored: media_store.Stored) -> None:
        try:
            self.store.delete(None, row.id, stored.store_key)  # type: ignore[arg-type]  # a bucket needs none
        except Exception as exc:  # noqa: BLE001 - the next fetch writes the same key again; prune removes it
            log.warning("media %s: could not remove the object of a fetch that did not count: %s", row.id,
                        type(exc).__name__)

    # --- outcomes ----------------------------------------------------------------------------------------------------

    def _finish(self, row: queries.ClaimedMedia, failure: _Failure, *, pause: bool = True) -> str:
        corrupt_fetches = row.corrupt_fetches + (1 if failure.corrupt else 0)
        state, delay = media_policy.after_failure(
            failure.verdict, row.attempts, row.seconds_left, base=self.settings.retry_base_seconds,
            cap=self.settings.retry_max_seconds, corrupt_fetches=corrupt_fetches)
        lookup = failure.lookup
        token = failure.verdict is Verdict.TOKEN
        entry = {"id": row.id, "state": state.value, "delay": delay, "refund": token and state is MediaState.PENDING,
                 "corrupt_fetches": corrupt_fetches,
                 "error": {"error": failure.reason, "attempt": row.attempts},
                 "mime_type": lookup.mime_type if lookup else None,
                 "declared_size": lookup.file_size if lookup else None,
                 "declared_sha256": lookup.sha256 if lookup else None}
        if token and pause and row.phone_number_id is not None:  # first: the row's outcome then finds it paused
            self._pause_sender(row.phone_number_id, failure.reason)
        queries.finish_media(self.engine, worker_id=self.worker_id, outcomes=json.dumps([entry]))
        outcome = (MediaFetchOutcome.TOKEN if token and state is MediaState.PENDING else
                   MediaFetchOutcome.RETRY if state is MediaState.PENDING else MediaFetchOutcome(state.value))
        self._count(outcome)
        (log.warning if state is not MediaState.PENDING else log.info)(
            "media %s of message %s, attempt %d: %s; %s", row.id, row.wamid, row.attempts, failure.reason,
            f"next try in {delay:.1f} s" if delay is not None else f"now {state.value}",
            extra={"media_id": row.id, "phone_number_id": row.phone_number_id})
        return state.value

    def _pause_sender(self, phone_number_id: str, reason: str) -> None:
        """The sender's token was refused: pause the sender as a send would (every worker hears of it), and its
        other media wait as long; the queue goes on with the other senders'."""
        seconds = media_policy.TOKEN_PAUSE_SECONDS
        queries.pause_sender(self.engine, phone_number_id=phone_number_id, seconds=seconds,
                             reason=f"media fetch: {reason}", default_mps=self.settings.rate_limit_mps)
        queries.defer_sender_media(self.engine, phone_number_id=phone_number_id, seconds=seconds)
        self.metrics.count("wa_outbox_throttle_pauses_total", reason="sender_paused")
        self.metrics.count("wa_outbox_sender_alerts_total", phone_number_id=phone_number_id)
        log.error("sender %s paused for %.0f s: its token was refused fetching media: %s", phone_number_id, seconds,
                  reason, extra={"alert": "sender_paused", "phone_number_id": phone_number_id})

    def _count(self, outcome: MediaFetchOutcome) -> None:
        with self._lock:
            self.stats[outcome.value] += 1
        self.metrics.count("wa_outbox_media_fetches_total", outcome=outcome.value)


class _Rollback(Exception):
    """Leave the chunks' transaction without keeping anything; `failure` None: the lease was lost."""

    def __init__(self, failure: _Failure | None) -> None:
        super().__init__("rollback")
        self.failure = failure


class _LeaseLost(Exception):
    """Another worker holds the media now: stop downloading, keep nothing."""
