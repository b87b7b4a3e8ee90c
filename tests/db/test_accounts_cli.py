"""`wa-outbox apps`, `senders` and `secrets` (the CLI contract of issue 19) in-process against the test database:
each command with and without --json, refusals as one line with a non-zero exit and nothing changed, and no output
or log line of any of them holding a secret, a token or the key."""

from __future__ import annotations

import json
import logging

import pytest
from cryptography.fernet import Fernet

from wa_outbox.secret_box import SecretBox, fingerprint, generate_key

KEY, NEW_KEY = generate_key(), generate_key()
SECRETS = {"APP_SECRET_ONE": "cli-app-secret-0001", "APP_SECRET_TWO": "cli-app-secret-0002",
           "APP_SECRET_NEW": "cli-app-secret-0003", "TOKEN_ONE": "EAAGcli-token-0001",
           "TOKEN_TWO": "EAAGcli-token-0002", "TOKEN_NEW": "EAAGcli-token-0003"}
STDIN_TOKEN = "EAAGcli-token-stdin-0004"


@pytest.fixture
def cli(run, monkeypatch, caplog):
    """`run` with WA_OUTBOX_SECRET_KEY and the secrets in the environment; every result is kept for the grep."""
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv("WA_OUTBOX_SECRET_KEY", KEY)
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    results = []

    def invoke(*args: str, input: str | None = None):
        result = run(*args, input=input)
        results.append((args, result))
        return result
    invoke.results = results  # type: ignore[attr-defined]
    return invoke


def ok(result) -> str:
    assert result.exit_code == 0, result.output
    return result.output


def json_lines(result) -> list[dict]:
    return [json.loads(line) for line in ok(result).splitlines()]


def register(cli) -> None:
    ok(cli("apps", "add", "111", "--secret-env", "APP_SECRET_ONE", "--name", "Brand A"))
    ok(cli("apps", "add", "222", "--secret-ref", "APP_SECRET_TWO"))
    ok(cli("senders", "add", "5001", "--waba", "901", "--app", "111", "--token-env", "TOKEN_ONE", "--portfolio", "77",
           "--mps", "20", "--alias", "brand-a"))
    ok(cli("senders", "add", "5002", "--waba", "902", "--app", "222", "--token-ref", "TOKEN_TWO"))


def test_apps_commands(cli, db):
    added = json_lines(cli("apps", "add", "111", "--secret-env", "APP_SECRET_ONE", "--json"))
    assert added[0]["app_id"] == "111" and added[0]["created"] is True
    assert added[0]["secret_fingerprint"] == fingerprint(SECRETS["APP_SECRET_ONE"])
    again = ok(cli("apps", "add", "111", "--secret-env", "APP_SECRET_ONE"))
    assert "unchanged" in again
    ok(cli("apps", "add", "222", "--secret-stdin", input=SECRETS["APP_SECRET_TWO"] + "\n"))
    rotated = json_lines(cli("apps", "rotate-secret", "111", "--secret-env", "APP_SECRET_NEW", "--overlap", "1",
                             "--json"))[0]
    assert rotated["previous_fingerprint"] == fingerprint(SECRETS["APP_SECRET_ONE"]) and rotated["previous_expires_at"]
    listed = ok(cli("apps", "list")).splitlines()
    assert listed[0].split("\t")[:4] == ["app_id", "name", "secret", "source"] and len(listed) == 3
    assert [r["app_id"] for r in json_lines(cli("apps", "list", "--json"))] == ["111", "222"]
    shown = ok(cli("apps", "show", "111"))
    assert fingerprint(SECRETS["APP_SECRET_NEW"]) in shown and "previous secret" in shown
    assert json_lines(cli("apps", "show", "222", "--json"))[0]["secret_ref"] is None
    assert json_lines(cli("apps", "remove", "222", "--json")) == [{"app_id": "222", "removed": True}]
    assert "removed" in ok(cli("apps", "remove", "111"))
    assert db.execute("SELECT count(*) FROM wa_outbox.meta_apps").fetchone()[0] == 0


def test_senders_commands(cli, db):
    register(cli)
    listed = ok(cli("senders", "list")).splitlines()
    header, rows = listed[0].split("\t"), [line.split("\t") for line in listed[1:]]
    assert header[:3] == ["phone_number_id", "alias", "source"]
    by_id = {r[0]: dict(zip(header, r, strict=True)) for r in rows}
    assert by_id["100000000000001"]["source"] == "environment"  # WHATSAPP_PHONE_NUMBER_ID, marked as such
    assert by_id["5001"]["token"] == "encrypted" and by_id["5001"]["mps"] == "20"
    assert by_id["5001"]["token_fingerprint"] == fingerprint(SECRETS["TOKEN_ONE"])
    assert by_id["5002"]["token"] == "env:TOKEN_TWO" and by_id["5002"]["mps"] == "default"
    as_json = {r["phone_number_id"]: r for r in json_lines(cli("senders", "list", "--json"))}
    assert as_json["5001"]["portfolio_id"] == "77" and as_json["100000000000001"]["from_environment"] is True

    # the environment's pacing and pause show too (rate_limits)
    db.execute("INSERT INTO wa_outbox.rate_limits (phone_number_id, mps, tokens, paused_until, pause_reason) "
               "VALUES ('100000000000001', 40, 0, now() + interval '1 hour', 'auth: 190')")
    env = json_lines(cli("senders", "show", "100000000000001", "--json"))[0]
    assert env["paused"] is True and env["pause_reason"] == "auth: 190" and env["mps"] == 40

    replaced = json_lines(cli("senders", "set-token", "5002", "--token-env", "TOKEN_NEW", "--json"))[0]
    assert replaced["token_source"] == "encrypted" and replaced["token_fingerprint"] == fingerprint(
        SECRETS["TOKEN_NEW"])
    ok(cli("senders", "set-token", "5002", "--token-stdin", input=STDIN_TOKEN + "\n"))
    assert "alias: brand-a" in ok(cli("senders", "show", "5001"))
    removed = json_lines(cli("senders", "remove", "5002", "--json"))[0]
    assert removed == {"phone_number_id": "5002", "removed": True, "business_account_removed": "902"}
    ok(cli("senders", "remove", "5001"))
    assert db.execute("SELECT count(*) FROM wa_outbox.senders").fetchone()[0] == 0


@pytest.mark.parametrize("args,fragment", [
    (("apps", "add", "111"), "exactly one of --secret-env"),
    (("apps", "add", "111", "--secret-env", "APP_SECRET_ONE", "--secret-ref", "APP_SECRET_ONE"), "exactly one"),
    (("apps", "add", "abc", "--secret-env", "APP_SECRET_ONE"), "digits"),
    (("apps", "add", "333", "--secret-env", "UNSET_VARIABLE"), "UNSET_VARIABLE"),
    (("apps", "add", "111", "--secret-env", "APP_SECRET_TWO"), "rotate-secret"),
    (("apps", "rotate-secret", "999", "--secret-env", "APP_SECRET_TWO"), "no app 999"),
    (("apps", "rotate-secret", "111", "--secret-env", "APP_SECRET_TWO", "--overlap", "-2"), "overlap"),
    (("apps", "show", "999"), "no app 999"),
    (("apps", "remove", "111"), "still has business accounts (901)"),
    (("senders", "add", "5003", "--waba", "901", "--app", "222", "--token-env", "TOKEN_ONE"), "belongs to app 111"),
    (("senders", "add", "5003", "--waba", "909", "--app", "111", "--token-env", "TOKEN_ONE", "--alias", "brand-a"),
     "5001"),
    (("senders", "add", "5003", "--waba", "909", "--app", "111", "--token-env", "TOKEN_ONE", "--mps", "0"), "mps"),
    (("senders", "add", "5003", "--waba", "909", "--app", "111"), "exactly one of --token-env"),
    (("senders", "set-token", "5999", "--token-env", "TOKEN_ONE"), "no sender 5999"),
    (("senders", "show", "5999"), "no sender 5999"),
    (("senders", "remove", "5999"), "no sender 5999"),
])
def test_refusals_are_one_line_and_change_nothing(cli, db, args, fragment):
    register(cli)
    before = [db.execute(f"SELECT * FROM wa_outbox.{t} ORDER BY 1").fetchall()
              for t in ("meta_apps", "app_secrets", "business_accounts", "senders", "rate_limits")]
    result = cli(*args)
    assert result.exit_code != 0 and fragment in result.output
    assert "Traceback" not in result.output
    after = [db.execute(f"SELECT * FROM wa_outbox.{t} ORDER BY 1").fetchall()
             for t in ("meta_apps", "app_secrets", "business_accounts", "senders", "rate_limits")]
    assert after == before


def test_without_the_key_storing_is_refused(run, monkeypatch, db):
    monkeypatch.delenv("WA_OUTBOX_SECRET_KEY", raising=False)
    monkeypatch.setenv("APP_SECRET_ONE", SECRETS["APP_SECRET_ONE"])
    result = run("apps", "add", "111", "--secret-env", "APP_SECRET_ONE")
    assert result.exit_code == 2 and "WA_OUTBOX_SECRET_KEY is not set" in result.output
    assert db.execute("SELECT count(*) FROM wa_outbox.meta_apps").fetchone()[0] == 0
    assert run("apps", "add", "111", "--secret-ref", "APP_SECRET_ONE").exit_code == 0  # a reference needs no key


def test_generate_key_and_the_rotation_procedure(cli, run, monkeypatch, db):
    key = ok(cli("secrets", "generate-key")).strip()
    Fernet(key.encode())  # a valid Fernet key
    assert Fernet(json_lines(cli("secrets", "generate-key", "--json"))[0]["key"].encode())
    register(cli)  # under KEY
    monkeypatch.setenv("WA_OUTBOX_SECRET_KEY", f"{NEW_KEY},{KEY}")  # the new key in front
    done = json_lines(cli("secrets", "rotate-key", "--json"))[0]
    assert done == {"app_secrets": 1, "senders": 1, "endpoints": 0}
    monkeypatch.setenv("WA_OUTBOX_SECRET_KEY", NEW_KEY)  # the old key dropped
    assert "1 app secret(s), 1 sender token(s)" in ok(cli("secrets", "rotate-key"))
    token = db.execute("SELECT token_enc FROM wa_outbox.senders WHERE phone_number_id = '5001'").fetchone()[0]
    assert SecretBox([NEW_KEY]).decrypt(token) == SECRETS["TOKEN_ONE"]
    monkeypatch.setenv("WA_OUTBOX_SECRET_KEY", KEY)  # only the old key: refused, one line, nothing changed
    refused = cli("secrets", "rotate-key")
    assert refused.exit_code != 0 and "cannot be decrypted" in refused.output


def test_no_output_and_no_log_line_holds_a_secret(cli, caplog, db):
    """Every apps/senders/secrets command, its --json form and its refusals: none prints a secret, a token or the
    key, nor logs one."""
    register(cli)
    for group, commands in {
        "apps": [("list",), ("list", "--json"), ("show", "111"), ("show", "222", "--json"),
                 ("rotate-secret", "111", "--secret-env", "APP_SECRET_NEW"),
                 ("rotate-secret", "111", "--secret-env", "APP_SECRET_NEW", "--json"),
                 ("add", "111", "--secret-env", "APP_SECRET_TWO")],
        "senders": [("list",), ("list", "--json"), ("show", "5001"), ("show", "5002", "--json"),
                    ("set-token", "5001", "--token-env", "TOKEN_NEW"),
                    ("set-token", "5001", "--token-stdin", "--json"),
                    ("add", "5003", "--waba", "901", "--app", "222", "--token-env", "TOKEN_ONE"),
                    ("add", "5001", "--waba", "901", "--app", "111", "--token-env", "TOKEN_ONE", "--json")],
        "secrets": [("rotate-key",), ("rotate-key", "--json")],
    }.items():
        for args in commands:
            cli(group, *args, input=STDIN_TOKEN + "\n")
    ok(cli("senders", "remove", "5002", "--json"))
    ok(cli("apps", "remove", "222"))
    text = "\n".join(r.output for _, r in cli.results) + "\n" + caplog.text
    assert len(cli.results) > 20 and "sha256:" in text
    leaked = [name for name, value in {**SECRETS, "STDIN_TOKEN": STDIN_TOKEN, "KEY": KEY}.items() if value in text]
    assert not leaked, f"in the output or the logs: {leaked}"
