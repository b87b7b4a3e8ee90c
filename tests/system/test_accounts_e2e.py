"""Issue 19's "Done when", end to end: one deployment serving two Meta apps, three business accounts (WABAs) and five
numbers, through the real web (gunicorn), a real worker process (`wa-outbox worker`) and the real simulator process
(`wa-outbox simulator --accounts FILE`, its webhooks posted to the web), configured with the CLI as an operator
would (`secrets generate-key`, `apps add --secret-env`, `senders add --token-env | --token-ref`, `senders
set-token`), and with no WHATSAPP_ACCESS_TOKEN, WHATSAPP_APP_SECRET or WHATSAPP_PHONE_NUMBER_ID in any process's
environment.

It proves, in order: every number's messages (enqueued by id and by alias, through /v1/messages and SQL) went out
with that number's own token (the simulator accepts nothing else) and each status webhook was verified by its own
app's secret and routed to its own number; a token rotated while the worker runs caused no dead letter and the
later sends used the new token; a revoked token paused only its sender, with the `sender_paused` alert and
wa_outbox_sender_alerts_total naming it, while the others, its WABA sibling included, kept sending; a signed
webhook for an unregistered number was stored, answered 200, counted and shown on /ops; and no command's output,
log, page, metric, /v1 answer or pg_dump holds any app secret, token or the Fernet key."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import API_TOKEN, meta_body
from tests.db.test_webhook_apps import message as inbound_webhook
from tests.live import wait_for
from tests.processes import ROOT, free_port, pg_dump_for
from wa_outbox.secret_box import fingerprint
from wa_outbox.webhooks import sign

FORBIDDEN = ("WHATSAPP_ACCESS_TOKEN", "WHATSAPP_APP_SECRET", "WHATSAPP_PHONE_NUMBER_ID")
TEXT = {"type": "text", "text": {"body": "pedido confirmado"}}
AUTH = {"Authorization": f"Bearer {API_TOKEN}"}
WAIT = 90  # seconds: generous, for a loaded 2-core machine

APP1, APP2 = "613000000000001", "613000000000002"
WABA1, WABA2, WABA3 = "102000000000001", "102000000000002", "102000000000003"
UNREGISTERED = "106500000000099"  # a number of WABA1 that nobody registered


@dataclass(frozen=True)
class Number:
    id: str
    waba: str
    app: str
    alias: str | None
    token: str        # what the simulator accepts for this number, and nothing else
    token_ref: str | None = None  # --token-ref VAR (the worker's environment holds VAR) instead of --token-env


def _token() -> str:
    return "EAAG" + secrets.token_urlsafe(40)  # the shape of a system-user token; random, so a grep means a leak


# One WABA with one number of app 1, one with two of app 1, one with two of app 2.
N1 = Number("106500000000001", WABA1, APP1, "brand-a", _token())
N2 = Number("106500000000002", WABA2, APP1, None, _token())                       # its token is rotated
N3 = Number("106500000000003", WABA2, APP1, "store-br", _token(), token_ref="STORE_BR_TOKEN")
N4 = Number("106500000000004", WABA3, APP2, "client-x", _token())
N5 = Number("106500000000005", WABA3, APP2, None, _token(), token_ref="CLIENT_Y_TOKEN")  # its token is revoked
NUMBERS = (N1, N2, N3, N4, N5)
APP_SECRETS = {APP1: secrets.token_hex(16), APP2: secrets.token_hex(16)}  # Meta's app secrets are 32 hex digits
N2_NEW_TOKEN = _token()
N5_NEW_TOKEN = _token()  # the revoked one's replacement


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment less every wa-outbox and WhatsApp variable, plus `extra`; never the three single-
    number variables."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WHATSAPP_", "WA_OUTBOX_"))}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.update(PYTHONUNBUFFERED="1", **extra)
    assert not set(env) & set(FORBIDDEN)
    return env


class Deployment:
    """The processes and everything they printed: the CLI commands' outputs as they ran, the services' logs in
    files (no pipe to fill up while nobody reads it)."""

    def __init__(self, tmp: Path, database_url: str):
        self.tmp = tmp
        self.database_url = database_url
        self.outputs: dict[str, str] = {}  # what was shown, by where: searched for secrets at the end
        self.procs: dict[str, tuple[subprocess.Popen, IO[str]]] = {}
        self.key = ""

    def cli(self, *args: str, status: int = 0, **env: str) -> str:
        """`wa-outbox ARGS` with `env` added; its output, after checking its exit status."""
        done = subprocess.run([sys.executable, "-m", "wa_outbox.cli", *args], cwd=ROOT, capture_output=True,
                              text=True, timeout=120,
                              env=clean_env(DATABASE_URL=self.database_url, WA_OUTBOX_SECRET_KEY=self.key, **env))
        self.outputs[f"wa-outbox {' '.join(args)} #{len(self.outputs)}"] = done.stdout + done.stderr
        assert done.returncode == status, f"wa-outbox {' '.join(args)}: {done.stdout}{done.stderr}"
        return done.stdout

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> subprocess.Popen:
        log = open(self.tmp / f"{name}.log", "w+", encoding="utf-8")  # closed in stop()
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, text=True)
        self.procs[name] = (proc, log)
        return proc

    def log(self, name: str) -> str:
        return (self.tmp / f"{name}.log").read_text(encoding="utf-8", errors="replace")

    def wait_up(self, name: str, url: str) -> None:
        proc = self.procs[name][0]

        def up() -> bool:
            assert proc.poll() is None, f"{name} exited {proc.returncode}:\n{self.log(name)}"
            try:
                return requests.get(url, timeout=5).ok
            except (requests.ConnectionError, requests.Timeout):
                return False
        wait_for(up, timeout=WAIT, interval=0.1, what=f"{name} to answer {url}")

    def stop(self) -> dict[str, int | None]:
        """SIGTERM every process (the worker first: it drains), wait for each; their exit codes."""
        codes: dict[str, int | None] = {}
        for name in ("worker", "simulator", "web"):
            if name not in self.procs:
                continue
            proc, log = self.procs[name]
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                codes[name] = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
                codes[name] = None
            log.close()
            self.outputs[f"{name} log"] = self.log(name)
        return codes


def samples(text: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sender_alerts(text: str) -> dict[str, float]:
    return {dict(labels)["phone_number_id"]: value for (name, labels), value in samples(text).items()
            if name == "wa_outbox_sender_alerts_total" and value}


def log_records(text: str) -> list[dict]:
    records = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return records


@pytest.mark.parametrize("listen", ["true", "false"], ids=["listen", "poll"])
def test_two_apps_three_wabas_five_numbers_end_to_end(database_url, db, tmp_path, listen):
    """`listen`: WA_OUTBOX_LISTEN for the web and the worker. With "false" (PgBouncer in transaction mode) the worker
    asks whether a token changed at most once a second, so a send right after a rotation usually goes out with the
    old token first: the refused-then-resent path, through real processes."""
    stack = Deployment(tmp_path, database_url)
    web_port, sim_port, worker_metrics_port = free_port(), free_port(), free_port()
    web = f"http://127.0.0.1:{web_port}"
    sim = f"http://127.0.0.1:{sim_port}"
    ref_values = {n.token_ref: n.token for n in NUMBERS if n.token_ref}
    expected: dict[int, str] = {}  # notification id -> the phone number id it must go from

    # --- the operator's set-up, with the CLI ---------------------------------------------------------------------
    key_output = subprocess.run([sys.executable, "-m", "wa_outbox.cli", "secrets", "generate-key"], cwd=ROOT,
                                capture_output=True, text=True, timeout=60, env=clean_env())
    assert key_output.returncode == 0, key_output.stderr
    stack.key = key_output.stdout.strip()  # (the one output meant to show the key: not searched)
    for app_id, secret in APP_SECRETS.items():
        stack.cli("apps", "add", app_id, "--secret-env", "APP_SECRET", "--name", f"app {app_id[-1]}", "--json",
                  APP_SECRET=secret)
    for i, n in enumerate(NUMBERS):
        args = ["senders", "add", n.id, "--waba", n.waba, "--app", n.app, "--mps", "20"]
        args += ["--alias", n.alias] if n.alias else []
        args += ["--portfolio", "5550001"] if n.app == APP2 else []
        args += ["--json"] if i % 2 else []
        if n.token_ref:
            stack.cli(*args, "--token-ref", n.token_ref, **ref_values)
        else:
            stack.cli(*args, "--token-env", "SENDER_TOKEN", SENDER_TOKEN=n.token)
    senders = {s["phone_number_id"]: s for s in map(json.loads, stack.cli("senders", "list", "--json").splitlines())}
    assert set(senders) == {n.id for n in NUMBERS}  # no environment sender: there is none
    stack.cli("apps", "list")
    stack.cli("senders", "list")
    stack.cli("apps", "show", APP1, "--json")
    # refusals hold no secret either: another app's secret for app 1, a token that is not one word, an unset variable
    stack.cli("apps", "add", APP1, "--secret-env", "APP_SECRET", status=1, APP_SECRET=APP_SECRETS[APP2])
    stack.cli("senders", "set-token", N1.id, "--token-env", "SENDER_TOKEN", status=2,
              SENDER_TOKEN=f"{N1.token} {N2.token}")
    stack.cli("senders", "set-token", N1.id, "--token-env", "UNSET_TOKEN", status=2)

    accounts = tmp_path / "accounts.json"  # a file: the simulator's tokens and secrets stay off its command line
    accounts.write_text(json.dumps({
        "apps": {app_id: {"secret": secret} for app_id, secret in APP_SECRETS.items()},
        "numbers": {n.id: {"token": n.token, "app": n.app, "waba": n.waba} for n in NUMBERS}}))

    try:
        stack.start("web", [sys.executable, "-m", "gunicorn", "--config", "python:wa_outbox.gunicorn_conf",
                            "wsgi:app"],
                    clean_env(DATABASE_URL=database_url, WA_OUTBOX_SECRET_KEY=stack.key,
                              WA_OUTBOX_BIND=f"127.0.0.1:{web_port}", WHATSAPP_VERIFY_TOKEN="vt",
                              WA_OUTBOX_API_TOKENS=API_TOKEN, WEB_CONCURRENCY="2", WA_OUTBOX_WEB_THREADS="4",
                              WA_OUTBOX_LISTEN=listen, LOG_LEVEL="DEBUG"))
        stack.start("simulator", [sys.executable, "-m", "wa_outbox.cli", "simulator", "--port", str(sim_port),
                                  "--webhook-url", f"{web}/webhooks/whatsapp", "--status-delay-ms", "50",
                                  "--accounts", str(accounts)],
                    clean_env(LOG_LEVEL="DEBUG"))
        stack.start("worker", [sys.executable, "-m", "wa_outbox.cli", "worker"],
                    clean_env(DATABASE_URL=database_url, WA_OUTBOX_SECRET_KEY=stack.key,
                              WHATSAPP_API_BASE_URL=f"{sim}/v23.0", WA_OUTBOX_POLL_INTERVAL="0.2",
                              WA_OUTBOX_CONNECT_TIMEOUT="2", WA_OUTBOX_SEND_TIMEOUT="20",
                              WA_OUTBOX_SHUTDOWN_GRACE="5", WA_OUTBOX_WORKER_METRICS_PORT=str(worker_metrics_port),
                              WA_OUTBOX_LISTEN=listen, LOG_LEVEL="DEBUG", **ref_values))
        stack.wait_up("web", f"{web}/healthz")
        stack.wait_up("simulator", f"{sim}/_admin/stats")
        stack.wait_up("worker", f"http://127.0.0.1:{worker_metrics_port}/metrics")

        def sim_stats() -> dict:
            return requests.get(f"{sim}/_admin/stats", timeout=10).json()

        def sim_messages(number: Number) -> list[dict]:
            return requests.get(f"{sim}/_admin/messages", params={"phone_number_id": number.id},
                                timeout=10).json()["messages"]

        def status_counts(ids) -> Counter:
            rows = db.execute("SELECT status FROM wa_outbox.notifications WHERE id = ANY(%s)", (list(ids),))
            return Counter(status for (status,) in rows)

        def all_read(ids) -> bool:
            return status_counts(ids) == Counter({"read": len(ids)})

        def resends() -> int:
            """Sends refused for a token the worker had cached, then made again at once with the new one."""
            return stack.log("worker").count("token changed since this worker read it")

        def enqueue(numbers, per_number: int) -> list[int]:
            """`per_number` messages to each number, alternating /v1/messages and SQL, its alias and its id."""
            ids = []
            for n in numbers:
                for k in range(per_number):
                    to = f"+55119{len(expected):08d}"
                    given = n.alias if n.alias and k % 2 == 0 else n.id
                    if k % 4 < 2:
                        answer = requests.post(f"{web}/v1/messages", headers=AUTH, timeout=10,
                                               json={"to": to, "message": TEXT, "phone_number_id": given})
                        assert answer.status_code == 202, answer.text
                        nid = answer.json()["id"]
                    else:
                        nid = db.execute("SELECT wa_outbox.enqueue(%s, %s::jsonb, phone_number_id => %s)",
                                         (to, json.dumps(TEXT), given)).fetchone()[0]
                    expected[nid] = n.id
                    ids.append(nid)
            return ids

        # --- every number sends with its own token; its webhooks verified by its own app -----------------------
        refused = requests.post(f"{web}/v1/messages", headers=AUTH, timeout=10, json={"to": "+5511900000000",
                                                                                       "message": TEXT})
        assert refused.status_code == 400 and "several senders" in refused.json()["error"]["message"]
        first = enqueue(NUMBERS, 4)
        wait_for(lambda: all_read(first), timeout=WAIT, interval=0.2, what="the first round read")
        for n in NUMBERS:
            sent = sim_messages(n)
            assert len(sent) == 4 and {expected[int(m["biz_opaque_callback_data"])] for m in sent} == {n.id}
        stats = sim_stats()
        assert stats["outcomes"] == {"accepted": 20}, stats  # no 'unauthorized', no 'no_access'

        # --- a token rotated while everything runs: no dead letter, the next sends use the new token -----------
        during = enqueue((N1, N3, N4, N5), 3)  # the others keep sending meanwhile
        requests.post(f"{sim}/_admin/config", timeout=10, json={"numbers": {N2.id: {
            "token": N2_NEW_TOKEN, "app": N2.app, "waba": N2.waba}}}).raise_for_status()
        stack.cli("senders", "set-token", N2.id, "--token-env", "NEW_TOKEN", NEW_TOKEN=N2_NEW_TOKEN)
        rotated = enqueue((N2,), 4)
        wait_for(lambda: all_read(during + rotated), timeout=WAIT, interval=0.2, what="the rotation round read")
        assert len(sim_messages(N2)) == 8  # 4 more accepted, which only the new token is
        assert db.execute("SELECT count(*) FROM wa_outbox.notifications WHERE status = 'dead'").fetchone()[0] == 0
        # A send made before the worker dropped its cached token was refused (401) and made again at once with the
        # new one: each such refusal has its "sent again" line, and nothing else was refused.
        resent = resends()
        assert sim_stats()["outcomes"] == {"accepted": 20 + 12 + 4, **({"unauthorized": resent} if resent else {})}
        shown = json.loads(stack.cli("senders", "show", N2.id, "--json"))
        assert shown["token_fingerprint"] == fingerprint(N2_NEW_TOKEN)
        assert db.execute("SELECT count(*) FROM wa_outbox.rate_limits WHERE paused_until > now()").fetchone()[0] == 0

        # --- a revoked token pauses only its sender, with an alert naming it ---------------------------------
        before = sim_stats()["outcomes"]
        requests.post(f"{sim}/_admin/config", timeout=10, json={"numbers": {N5.id: {
            "token": None, "app": N5.app, "waba": N5.waba}}}).raise_for_status()
        blocked = enqueue((N5,), 3)
        others = enqueue((N1, N2, N3, N4), 2)
        nid = int(stack.cli("send", "--to", "+5511988887777", "--text", "pelo terminal", "--phone-number-id",
                            N4.alias or N4.id).split()[0])  # the id alone
        expected[nid] = N4.id
        others.append(nid)
        wait_for(lambda: db.execute("SELECT paused_until > now() FROM wa_outbox.rate_limits "
                                    "WHERE phone_number_id = %s", (N5.id,)).fetchone()[0],
                 timeout=WAIT, interval=0.2, what=f"sender {N5.id} paused")
        wait_for(lambda: all_read(others), timeout=WAIT, interval=0.2, what="the other senders' messages read")
        paused = [r[0] for r in db.execute("SELECT phone_number_id FROM wa_outbox.rate_limits "
                                           "WHERE paused_until > now()")]
        assert paused == [N5.id]
        wait_for(lambda: status_counts(blocked) == Counter({"queued": 3}), timeout=WAIT, interval=0.2,
                 what=f"{N5.id}'s messages back in the queue, waiting for the token to be fixed (not dead)")
        assert len(sim_messages(N5)) == 4 + 3
        after = sim_stats()["outcomes"]
        assert after["accepted"] == before["accepted"] + 9 and after["unauthorized"] > before.get("unauthorized", 0)
        assert "no_access" not in after and resends() == resent  # refused, and paused: the token had not changed
        # the pause is committed before the alert is counted and logged: wait for those too
        alerts = wait_for(lambda: [r for r in log_records(stack.log("worker")) if r.get("alert") == "sender_paused"],
                          timeout=WAIT, interval=0.2, what="the sender_paused alert in the worker's log")
        assert {r["phone_number_id"] for r in alerts} == {N5.id} and all(N5.id in r["message"] for r in alerts)
        wait_for(lambda: set(sender_alerts(requests.get(f"http://127.0.0.1:{worker_metrics_port}/metrics",
                                                        timeout=10).text)) == {N5.id},
                 timeout=WAIT, interval=0.2, what="the sender alert on the worker's metrics")
        # ... and on the web's /metrics, once the worker's next heartbeat has written its counters
        wait_for(lambda: set(sender_alerts(requests.get(f"{web}/metrics", timeout=10).text)) == {N5.id},
                 timeout=WAIT, interval=0.5, what="the sender alert on the web's /metrics")

        # ... until the operator gives it a new token and lifts the pause: its waiting messages go out with that token
        requests.post(f"{sim}/_admin/config", timeout=10, json={"numbers": {N5.id: {
            "token": N5_NEW_TOKEN, "app": N5.app, "waba": N5.waba}}}).raise_for_status()
        stack.cli("senders", "set-token", N5.id, "--token-env", "NEW_TOKEN", "--json", NEW_TOKEN=N5_NEW_TOKEN)
        stack.cli("ratelimit", "resume", N5.id)
        wait_for(lambda: all_read(blocked), timeout=WAIT, interval=0.2, what=f"{N5.id}'s messages read once resumed")
        assert sim_stats()["outcomes"] == {"accepted": after["accepted"] + 3,
                                           "unauthorized": after["unauthorized"] + resends() - resent}
        assert db.execute("SELECT count(*) FROM wa_outbox.notifications WHERE status <> 'read'").fetchone()[0] == 0

        # --- a webhook for a number nobody registered: stored, 200, counted, shown ----------------------------
        body = meta_body(inbound_webhook(WABA1, UNREGISTERED, "wamid.UNREGISTERED1"))
        answer = requests.post(f"{web}/webhooks/whatsapp", data=body, timeout=10, headers={
            "X-Hub-Signature-256": sign(APP_SECRETS[APP1], body), "Content-Type": "application/json"})
        assert answer.status_code == 200, answer.text
        assert db.execute("SELECT account_id, app_id, unregistered FROM wa_outbox.webhook_events "
                          "WHERE phone_number_id = %s", (UNREGISTERED,)).fetchall() == [(WABA1, APP1, True)]
        metrics = requests.get(f"{web}/metrics", timeout=10).text
        counted = samples(metrics)
        assert counted[("wa_outbox_webhook_unregistered_total", (("kind", "number"),))] == 1
        rejected = {labels: v for (name, labels), v in counted.items() if name == "wa_outbox_webhook_rejected_total"}
        assert rejected and not any(rejected.values()), rejected  # nothing refused: no wrong_app, no bad signature
        ops = requests.Session()
        login = ops.get(f"{web}/ops/login", timeout=10).text
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', login)
        assert csrf
        page = ops.post(f"{web}/ops/login", timeout=10, data={"token": API_TOKEN, "csrf_token": csrf.group(1),
                                                              "next": "/ops"})
        assert page.status_code == 200 and page.url.endswith("/ops"), page.status_code
        section = page.text[page.text.index('<section id="unregistered">'):]
        section = section[:section.index("</section>")]
        assert "Webhooks for unregistered numbers" in section and UNREGISTERED in section and WABA1 in section

        # --- every status webhook verified by its own app, routed to its own number ---------------------------
        accepted = {n.id: sim_messages(n) for n in NUMBERS}
        # each message accepted once, from the number it was enqueued for (its alias resolved at enqueue)
        assert sorted(int(m["biz_opaque_callback_data"]) for sent in accepted.values() for m in sent) \
            == sorted(expected)
        assert all(expected[int(m["biz_opaque_callback_data"])] == number for number, sent in accepted.items()
                   for m in sent)

        def routed() -> list[tuple]:
            return db.execute("SELECT phone_number_id, account_id, app_id, unregistered, count(*) "
                              "FROM wa_outbox.webhook_events WHERE kind = 'status' "
                              "GROUP BY 1, 2, 3, 4 ORDER BY 1").fetchall()
        # sent, delivered and read for each accepted message, under its number's WABA and app
        by_number = [(n.id, n.waba, n.app, False, 3 * len(accepted[n.id])) for n in NUMBERS]
        assert [len(accepted[n.id]) for n in NUMBERS] == [4 + 3 + 2, 4 + 4 + 2, 4 + 3 + 2, 4 + 3 + 2 + 1, 4 + 3 + 3]
        wait_for(lambda: routed() == by_number, timeout=WAIT, interval=0.2, what="every status webhook stored")

        # --- what was shown, gathered for the search below ----------------------------------------------------
        for path, sent_body, status in (
                ("/v1/apps", {"app_id": APP2, "secret": APP_SECRETS[APP1]}, 409),  # another secret: rotate-secret
                ("/v1/senders", {"phone_number_id": "not-digits", "waba_id": WABA3, "app_id": APP2,
                                 "token": N4.token}, 400),
                (f"/v1/senders/{N1.id}", {"token": f"{N1.token}\n{N2.token}"}, 400)):
            call = requests.patch if sent_body.keys() == {"token"} else requests.post
            refusal = call(f"{web}{path}", headers=AUTH, timeout=10, json=sent_body)
            assert refusal.status_code == status, refusal.text
            stack.outputs[f"refused {path} {sorted(sent_body)}"] = refusal.text
        for path in ("/v1/apps", f"/v1/apps/{APP1}", f"/v1/apps/{APP2}", "/v1/senders", f"/v1/senders/{N2.id}",
                     f"/v1/senders/{N5.id}"):
            shown_answer = requests.get(f"{web}{path}", headers=AUTH, timeout=10)
            assert shown_answer.status_code == 200, shown_answer.text
            stack.outputs[f"GET {path}"] = shown_answer.text
        stack.outputs["/ops"] = page.text
        stack.outputs["/ops/login"] = login
        stack.outputs["/metrics"] = requests.get(f"{web}/metrics", timeout=10).text
        stack.outputs["worker /metrics"] = requests.get(f"http://127.0.0.1:{worker_metrics_port}/metrics",
                                                        timeout=10).text
        stack.outputs["simulator /_admin/config"] = requests.get(f"{sim}/_admin/config", timeout=10).text
        stack.cli("senders", "list", "--json")
        stack.cli("apps", "list", "--json")
        stack.cli("ratelimit", "show")
    finally:
        codes = stack.stop()
    assert codes == {"worker": 0, "simulator": 0, "web": 0}, codes

    # --- no output of any command, log, page, metric or dump holds a secret -----------------------------------
    pg_dump = pg_dump_for(database_url)
    if pg_dump:
        dump = subprocess.run([pg_dump, "--schema=wa_outbox", database_url], capture_output=True, text=True,
                              timeout=120)
        assert dump.returncode == 0, dump.stderr
        assert "CREATE TABLE wa_outbox.senders" in dump.stdout and "STORE_BR_TOKEN" in dump.stdout  # data too
        stack.outputs["pg_dump --schema=wa_outbox"] = dump.stdout
    else:  # the dump is then left out, and the test says so
        print("no pg_dump as new as the server is installed: the database dump was not searched for secrets")
    assert "sender_paused" in stack.outputs["worker log"]
    named = {f"app {app_id}'s secret": secret for app_id, secret in APP_SECRETS.items()}
    named |= {f"sender {n.id}'s token": n.token for n in NUMBERS}
    named |= {f"sender {N2.id}'s new token": N2_NEW_TOKEN, f"sender {N5.id}'s new token": N5_NEW_TOKEN,
              "WA_OUTBOX_SECRET_KEY": stack.key}
    leaks = [f"{what} in {where}" for what, secret in named.items() for where, text in stack.outputs.items()
             if secret in text or secret[:16] in text]  # a truncated secret is a leak too
    assert not leaks, leaks
    assert len(stack.outputs) > 20

