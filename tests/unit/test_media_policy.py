"""Inbound media, decided (wa_outbox/media_policy.py) and served in ranges (wa_outbox/media_read.py). No database."""

from __future__ import annotations

import base64
import hashlib

import pytest

from wa_outbox import media_policy as mp
from wa_outbox.media_read import Unsatisfiable, parse_range
from wa_outbox.media_store import rechunk

DATA = b"the customer's photo"
DIGEST = hashlib.sha256(DATA).digest()


def test_media_of_reads_each_kind_and_nothing_else():
    for kind in mp.MEDIA_KINDS:
        found = mp.media_of({"type": kind, kind: {"id": "1003383421387256", "mime_type": "image/jpeg",
                                                  "sha256": "abc", "filename": "a.pdf"}})
        assert found == {"media_id": "1003383421387256", "kind": kind, "mime_type": "image/jpeg", "sha256": "abc",
                         "filename": "a.pdf"}
    assert mp.media_of({"type": "text", "text": {"body": "hi"}}) is None
    assert mp.media_of({"type": "image", "image": {"mime_type": "image/jpeg"}}) is None  # no id
    assert mp.media_of({"type": "image", "image": {"id": ""}}) is None
    assert mp.media_of({"type": "image", "image": {"id": "x" * 200}}) is None
    assert mp.media_of({"type": "image", "image": "garbage"}) is None
    assert mp.media_of(None) is None
    assert mp.media_of({"type": "image", "image": {"id": 123}})["media_id"] == "123"


def test_a_declared_sha256_is_read_as_hex_or_base64():
    assert mp.decode_sha256(DIGEST.hex()) == DIGEST
    assert mp.decode_sha256(DIGEST.hex().upper()) == DIGEST
    assert mp.decode_sha256(base64.b64encode(DIGEST).decode()) == DIGEST          # the webhook's
    assert mp.decode_sha256(base64.b64encode(DIGEST).decode().rstrip("=")) == DIGEST
    assert mp.decode_sha256(base64.urlsafe_b64encode(DIGEST).decode()) == DIGEST
    assert mp.decode_sha256("SfInY0gGKTsJlUWbwxC1k+FAD0FZHv") is None              # Meta's truncated example
    assert mp.decode_sha256("<HASH>") is None and mp.decode_sha256(None) is None


def test_check_bytes_compares_size_and_every_declared_sha256():
    assert mp.check_bytes(len(DATA), DIGEST, file_size=len(DATA),
                          declared=[base64.b64encode(DIGEST).decode(), DIGEST.hex()]) is None
    assert "declared 5" in mp.check_bytes(len(DATA), DIGEST, file_size=5, declared=[])
    assert "sha256" in mp.check_bytes(len(DATA), DIGEST, file_size=None, declared=[hashlib.sha256(b"x").hexdigest()])
    assert mp.check_bytes(len(DATA), DIGEST, file_size=None, declared=[None, "not a digest"]) is None


def test_judge_lookup():
    ok = mp.judge_lookup(200, {"url": "https://lookaside.example/x", "mime_type": "image/jpeg",
                               "sha256": DIGEST.hex(), "file_size": "303833", "id": "1"})
    assert ok.verdict is mp.Verdict.OK and ok.file_size == 303833 and ok.url
    assert mp.judge_lookup(200, {"url": "https://x", "file_size": "99"}, max_bytes=10).verdict is mp.Verdict.TOO_LARGE
    assert mp.judge_lookup(200, {"id": "1"}).verdict is mp.Verdict.RETRY          # no URL
    assert mp.judge_lookup(200, {"url": "ftp://x"}).verdict is mp.Verdict.RETRY
    assert mp.judge_lookup(None, None).verdict is mp.Verdict.RETRY
    assert mp.judge_lookup(503, None).verdict is mp.Verdict.RETRY
    assert mp.judge_lookup(429, {}).verdict is mp.Verdict.RETRY
    assert mp.judge_lookup(400, {"error": {"code": 131000}}).verdict is mp.Verdict.RETRY
    assert mp.judge_lookup(404, {"error": {"code": 100, "error_subcode": 33}}).verdict is mp.Verdict.GONE
    assert mp.judge_lookup(400, {"error": {"code": 100}}).verdict is mp.Verdict.GONE
    assert mp.judge_lookup(401, {"error": {"code": 190}}).verdict is mp.Verdict.TOKEN
    assert mp.judge_lookup(400, {"error": {"code": 190}}).verdict is mp.Verdict.TOKEN
    refused = mp.judge_lookup(401, {"error": {"code": 190, "message": "Invalid OAuth access token"}})
    assert "190" in refused.reason and refused.url is None


def test_judge_download():
    assert mp.judge_download(200) is mp.Verdict.OK
    assert mp.judge_download(401) is mp.Verdict.TOKEN
    for status in (403, 404, 410):
        assert mp.judge_download(status) is mp.Verdict.URL_EXPIRED
    for status in (None, 500, 503, 429):
        assert mp.judge_download(status) is mp.Verdict.RETRY


def test_retries_back_off_until_the_id_expires():
    delays = [mp.next_try_in(n, 10**9, base=5, cap=3600) for n in range(1, 20)]
    assert all(d is not None and d > 0 for d in delays)
    assert all(d <= 3600 for d in delays if d is not None)
    assert mp.next_try_in(12, 10, base=5, cap=3600) is None     # the id is gone before the next try
    assert mp.after_failure(mp.Verdict.RETRY, 12, 10, base=5, cap=3600) == (mp.MediaState.EXPIRED, None)
    state, delay = mp.after_failure(mp.Verdict.RETRY, 1, 10**6, base=5, cap=3600)
    assert state is mp.MediaState.PENDING and 2.5 <= delay <= 5


def test_after_failure_final_states():
    assert mp.after_failure(mp.Verdict.GONE, 1, 10**6, base=1, cap=1) == (mp.MediaState.FAILED, None)
    assert mp.after_failure(mp.Verdict.TOO_LARGE, 1, 10**6, base=1, cap=1) == (mp.MediaState.TOO_LARGE, None)
    assert mp.after_failure(mp.Verdict.RETRY, mp.MAX_CORRUPT_ATTEMPTS, 10**6, base=1, cap=1,
                            corrupt_fetches=mp.MAX_CORRUPT_ATTEMPTS) == (mp.MediaState.FAILED, None)
    assert mp.after_failure(mp.Verdict.RETRY, 1, 10**6, base=1, cap=1, corrupt_fetches=1)[0] is mp.MediaState.PENDING
    # many attempts (503s, outages, a dead worker's lease) and one wrong download: fetched again, not failed
    assert mp.after_failure(mp.Verdict.RETRY, 9, 10**6, base=1, cap=1, corrupt_fetches=1)[0] is mp.MediaState.PENDING
    # a token refused waits as long as the sender's pause, unless the id is gone by then
    assert mp.after_failure(mp.Verdict.TOKEN, 3, 10**6, base=1, cap=1) == (mp.MediaState.PENDING,
                                                                            mp.TOKEN_PAUSE_SECONDS)
    assert mp.after_failure(mp.Verdict.TOKEN, 3, 10, base=1, cap=1) == (mp.MediaState.EXPIRED, None)


@pytest.mark.parametrize("header, size, expected", [
    (None, 100, None), ("", 100, None),
    ("bytes=0-9", 100, (0, 10)), ("bytes=90-", 100, (90, 100)), ("bytes=-10", 100, (90, 100)),
    ("bytes=50-1000", 100, (50, 100)), ("bytes=-1000", 100, (0, 100)),
    ("bytes=0-1,5-6", 100, None), ("items=0-1", 100, None), ("bytes=9-3", 100, None), ("bytes=-", 100, None),
])
def test_parse_range(header, size, expected):
    assert parse_range(header, size) == expected


@pytest.mark.parametrize("header", ["bytes=100-", "bytes=200-300", "bytes=-0"])
def test_parse_range_unsatisfiable(header):
    with pytest.raises(Unsatisfiable):
        parse_range(header, 100)


def test_rechunk_holds_one_chunk():
    pieces = [b"a" * 3, b"b" * 10, b"", b"c"]
    out = list(rechunk(pieces, 4))
    assert b"".join(out) == b"".join(pieces) and all(len(c) == 4 for c in out[:-1])
