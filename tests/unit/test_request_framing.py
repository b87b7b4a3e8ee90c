"""Where a request ends, as the web worker's main thread decides it before a thread gets the request
(wa_outbox/web/gunicorn_worker.Framing): pure, no server."""

from __future__ import annotations

from wa_outbox.web.gunicorn_worker import Framing

HEAD = b"POST /webhooks/whatsapp HTTP/1.1\r\nHost: x\r\n"


def arrive(data: bytes, max_body: int = 1000, step: int = 1) -> tuple[int, Framing]:
    """Feed `data` `step` bytes at a time; how many bytes were there when the request was whole (-1: never)."""
    framing, buf = Framing(), bytearray()
    for i in range(0, len(data), step):
        buf += data[i:i + step]
        if framing.scan(buf, max_body):
            return len(buf), framing
    return -1, framing


def test_a_request_without_a_body_is_whole_at_the_blank_line():
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    assert arrive(request + b"GET /next")[0] == len(request)


def test_a_content_length_body_is_whole_at_its_last_byte_not_before():
    request = HEAD + b"Content-Length: 10\r\n\r\n0123456789"
    assert arrive(request)[0] == len(request)
    assert arrive(request[:-1])[0] == -1
    assert arrive(request + b"GET / HTTP/1.1\r\n", step=len(request) + 5)[1].body_end == len(request)


def test_a_chunked_body_is_whole_after_the_last_chunk_and_its_trailers():
    plain = HEAD + b"Transfer-Encoding: chunked\r\n\r\n5;ext=x\r\nhello\r\n3\r\n\r\n\n\r\n0\r\n\r\n"
    trailed = HEAD + b"Transfer-Encoding: gzip, Chunked\r\n\r\n2\r\nhi\r\n0\r\nX-T: 1\r\nX-U: 2\r\n\r\n"
    for request in (plain, trailed):
        assert arrive(request)[0] == len(request)
        assert arrive(request[:-1])[0] == -1


def test_a_declared_length_past_the_limit_is_handed_over_at_once_for_the_apps_413():
    whole, framing = arrive(HEAD + b"Content-Length: 1001\r\n\r\nab")
    assert whole == len(HEAD) + len(b"Content-Length: 1001\r\n\r\n")
    assert framing.over_limit


def test_ambiguous_framing_is_handed_over_at_once_for_gunicorns_400():
    for head in (b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n",
                 b"Content-Length: 5\r\nContent-Length: 6\r\n",
                 b"Content-Length: -5\r\n",
                 b"Transfer-Encoding: gzip\r\n"):
        request = HEAD + head + b"\r\n"
        whole, framing = arrive(request + b"abc")
        assert whole == len(request) and not framing.over_limit, head
    bad_chunk = HEAD + b"Transfer-Encoding: chunked\r\n\r\nzz\r\n"
    assert arrive(bad_chunk)[0] == len(bad_chunk)


def test_expect_100_continue_is_noticed():
    assert arrive(HEAD + b"Expect: 100-continue\r\nContent-Length: 3\r\n\r\n")[1].expects_continue
