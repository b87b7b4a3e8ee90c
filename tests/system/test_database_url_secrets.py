"""A DATABASE_URL's password never shows, however malformed the URL: generated passwords (with @ : / [ ] % ? # and
non-ASCII characters, raw or percent-encoded) in generated URLs (unbalanced brackets, bad ports, an unencoded '@' or
'/'). Settings.from_env raises nothing but a one-line ConfigError naming DATABASE_URL; redact_url never raises; and
neither they nor scrub() over what libpq says about the URL show the password or any run of 4 of its characters.
The CLI, gunicorn and the worker, started with such URLs, exit with status 2 and one line, no traceback.

The rule for "shows the password": a run of 4 characters of the password (or of its percent-encoded form) that holds a
non-ASCII character. Every generated password holds some, and no other part of the URL, nor any message of ours or of
libpq, does: such a run can only come from the password, whatever else the message says.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from hypothesis import example, given, settings, strategies as st

from wa_outbox.config import ConfigError, Settings, redact_url, scrub

ROOT = Path(__file__).resolve().parents[2]

# '*' is left out: *** is the mask, and a password of stars would be "shown" by every mask.
_ASCII = "abcXYZ019@:/[]%?#!$&'()+,;=-._~ "
_UNICODE = "éß密🙂ü"
passwords = st.text(alphabet=st.sampled_from(list(_ASCII + _UNICODE)), min_size=1, max_size=20).filter(
    lambda p: sum(c in _UNICODE for c in p) >= 1)
hosts = st.sampled_from(["db.example", "127.0.0.1", "[::1]", "[::1", "::1]", "h[ost", "", "db.example,other"])
ports = st.sampled_from(["", ":5432", ":", ":99x", ":-1", ":65536", ":5432,:x", ":[", ":%zz"])
tails = st.sampled_from(["/app", "", "/", "/a[b", "/app?sslmode=require", "/app?application_name=x@y", "/app#frag"])
schemes = st.sampled_from(["postgres", "postgresql", "postgresql+psycopg"])


@st.composite
def urls(draw) -> tuple[str, str]:
    """(url, password): the password raw (as people paste it) or percent-encoded (as they should)."""
    password = draw(passwords)
    written = quote(password, safe="") if draw(st.booleans()) else password
    user = draw(st.sampled_from(["app", "u", ""]))
    url = f"{draw(schemes)}://{user}:{written}@{draw(hosts)}{draw(ports)}{draw(tails)}"
    return url, password


def shown(password: str, text: str) -> list[str]:
    """The runs of the password (raw or percent-encoded) that appear in `text` and could only come from it."""
    found = []
    for form in {password, quote(password, safe="")}:
        for i in range(len(form) - 3):
            run = form[i:i + 4]
            telling = any(c in _UNICODE for c in run) or re.search(r"%(?:[89A-F][0-9A-F])", run)
            if telling and run in text:
                found.append(run)
    if any(c in _UNICODE for c in password) and password in text:
        found.append(password)
    return found


def libpq_says(url: str) -> str:
    """What a driver may quote about `url`: libpq's complaint when it cannot parse it, else every value it read
    (a misparsed URL puts pieces of the password in the host, port or database name), and the URL itself."""
    try:
        values = psycopg.conninfo.conninfo_to_dict(url)
    except (psycopg.ProgrammingError, UnicodeDecodeError) as exc:  # a %XX sequence that is no UTF-8: psycopg's own
        return str(exc)
    return f'connection to {url} failed: ' + ", ".join(f'{k} "{v}"' for k, v in values.items())


@settings(max_examples=400)
@given(urls())
@example(("postgresql://app:pa[ssé@db.example/app", "pa[ssé"))
@example(("postgresql://app:pa@ss3é@127.0.0.1/app", "pa@ss3é"))
@example(("postgresql://app:secretpwé@[::1/app", "secretpwé"))
@example(("postgresql://app:pa/ssééé@db.example/app", "pa/ssééé"))
@example(("postgresql://app:pwééé@db.example:99x/app", "pwééé"))
@example(("postgres://app:/ß@db.example/app?application_name=x@y", "/ß"))
@example(("postgresql://app:%A0é@db.example/app", "%A0é"))
@example(("postgres://app:@ß@db.example/app?application_name=x@y", "@ß"))
def test_a_malformed_database_url_never_shows_its_password(case):
    url, password = case
    try:
        loaded = Settings.from_env({"DATABASE_URL": url})
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith("DATABASE_URL") and "\n" not in message, message
        assert not shown(password, message), message
    else:
        assert not shown(password, repr(loaded))
        assert not shown(password, redact_url(loaded.database_url))
        assert not shown(password, scrub(libpq_says(loaded.database_url), loaded.database_url))
    redacted = redact_url(url)
    assert not shown(password, redacted), redacted
    # libpq's own words, and a driver quoting the URL, the password as written in it and as decoded.
    written = url.split("://", 1)[1].rsplit("@", 1)[0].split(":", 1)[1]
    for text in (libpq_says(url), f"{url} {password} {written}"):
        scrubbed = scrub(text, url)
        assert not shown(password, scrubbed), scrubbed


def test_the_issue_cases_are_refused_in_one_line():
    """An unbalanced '[' used to make the scrubber raise (a traceback quoting the URL); an unencoded '@' to leak the
    password's tail as the host."""
    for url, hidden in [("postgresql://app:pa[ss3secret@[::1/app", "ss3secret"),
                        ("postgresql://app:pa@ss3@127.0.0.1/app", "ss3")]:
        with pytest.raises(ConfigError) as info:
            Settings.from_env({"DATABASE_URL": url})
        assert hidden not in str(info.value) and "\n" not in str(info.value)
        assert str(info.value).startswith("DATABASE_URL=")
    assert redact_url("postgresql://app:pa[ss@h/app") == "postgresql://app:***@h/app"
    assert redact_url("postgresql://app:pa?ss#x@h/app") == "postgresql://app:***@h/app"
    assert scrub("host 'ss3@127.0.0.1'", "postgresql://app:pa@ss3@127.0.0.1/app") == "host '***@127.0.0.1'"


# --- the entry points: one line, status 2 ----------------------------------------------------------------------------

BAD_URLS = [
    ("postgresql://app:pa[ssé密码@[::1/app", "pa[ssé密码"),
    ("postgresql://app:pa@ss3é密码@127.0.0.1/app", "pa@ss3é密码"),
    ("postgresql://app:pa/ssé密码@127.0.0.1/app", "pa/ssé密码"),
    ("postgres://app:pwé密码@127.0.0.1:99x/app", "pwé密码"),
    ("postgresql://app:p%zzé密码@127.0.0.1/app", "p%zzé密码"),
]
ENTRY_POINTS = {
    "cli": [sys.executable, "-m", "wa_outbox.cli", "db", "current"],
    "worker": [sys.executable, "worker.py"],
    "web": [sys.executable, "-m", "gunicorn", "--config", "python:wa_outbox.gunicorn_conf", "wsgi:app"],
}
SERVICE_ENV = {"WHATSAPP_APP_SECRET": "app-secret", "WHATSAPP_VERIFY_TOKEN": "verify-token",
               "WA_OUTBOX_API_TOKENS": "api-token-0123456789", "WHATSAPP_ACCESS_TOKEN": "access-token",
               "WHATSAPP_PHONE_NUMBER_ID": "123456"}


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
@pytest.mark.parametrize("url, password", BAD_URLS)
def test_entry_points_refuse_a_malformed_url_in_one_line_with_status_2(entry_point, url, password):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WHATSAPP_", "WA_OUTBOX_"))}
    env.update(SERVICE_ENV, DATABASE_URL=url, PYTHONIOENCODING="utf-8")
    proc = subprocess.run(ENTRY_POINTS[entry_point], cwd=ROOT, env=env, capture_output=True, text=True,
                          encoding="utf-8", timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 2, output
    assert "Traceback" not in output and len(output.strip().splitlines()) == 1, output
    assert output.startswith("wa-outbox: configuration error: DATABASE_URL"), output
    assert not shown(password, output), output
