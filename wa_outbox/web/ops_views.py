"""/ops: the page an operator keeps open. Server-rendered HTML (templates/ops/), a little JavaScript (static/ops/),
for anyone holding one of WA_OUTBOX_API_TOKENS.

GET  /ops/login, POST /ops/login      a token → a session (a row in wa_outbox.ops_sessions) and its signed cookie
                                      (HttpOnly, SameSite=Strict, path /ops, Secure over HTTPS); POST /ops/logout
                                      deletes the row, which ends the session wherever its cookie was copied to
GET  /ops                             queues, throughput, workers, senders, dead letters, campaigns
GET  /ops?q=…                         search: message id, phone number, correlation id, wamid
GET  /ops/messages/<id>               one message and its whole timeline
POST /ops/messages/<id>/retry|purge   one dead message
POST /ops/dead/retry|purge            a dead-letter group (code, up to the newest id shown)
POST /ops/senders/resume              lift a sender's pause
POST /ops/endpoints/replay|enable     replay an endpoint's events (failed ones, or since a time); enable it again

Every POST but the login needs the session, and every POST (the login too) the CSRF token of the session in its form.
The cookie is Flask's signed session, its key derived from the app secret (session_key); it carries the session's
secret, its CSRF token and the flashed messages. Whether it is a session is Postgres's word (ops_sessions.py), asked
on every request: logged out, expired (12 h after login), or opened by a token no longer in WA_OUTBOX_API_TOKENS, it
is not. Changing the app secret ends every session. Wrong tokens are slowed per client (auth_throttle.py).
"""

from __future__ import annotations

import datetime
import hashlib
import hmac
import json
import logging
import secrets
from typing import Any

from flask import (
    Blueprint,
    Flask,
    abort,
    current_app,
    flash,
    g,
    get_flashed_messages,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from flask.sessions import SecureCookieSessionInterface

from .. import campaigns, endpoints, ops, outbox, queries
from ..config import DEV_API_TOKEN, Settings
from ..messages import format_phone
from ..states import hold_reason_text
from . import auth_throttle, ops_sessions
from .app_state import engine_of, settings_of

log = logging.getLogger(__name__)

blueprint = Blueprint("ops", __name__, url_prefix="/ops", template_folder="templates",
                      static_folder="static/ops", static_url_path="/static")

COOKIE_NAME = "wa_outbox_ops"
SESSION_LIFETIME = datetime.timedelta(seconds=ops_sessions.LIFETIME_SECONDS)  # the row's expires_at, and the
# signature's own timestamp, enforce it, whatever the browser does
CSRF_FIELD = "csrf_token"
SESSION_FIELD = "sid"  # the session's secret (its SHA-256 is the row's id)
_OPEN_ENDPOINTS = {"ops.login", "ops.login_submit", "ops.static"}
_SECURITY_HEADERS = {
    # No inline script or style anywhere on these pages (the charts are SVG attributes), nothing from elsewhere.
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                               "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",  # search URLs carry phone numbers
    "Cache-Control": "no-store",
}


def session_key(settings: Settings) -> bytes:
    """The session cookie's signing key, derived from the app secret (ops_sessions.signing_secret: without
    WHATSAPP_APP_SECRET, WA_OUTBOX_SECRET_KEY): nothing to configure. It no longer depends on the API tokens:
    removing one ends the sessions it opened (ops_sessions.is_live), not the others'."""
    return hmac.new(ops_sessions.signing_secret(settings).encode(), b"wa-outbox /ops session cookie",
                    hashlib.sha256).digest()


def token_matches(given: str, tokens: tuple[str, ...]) -> bool:
    """Compare against every token, always, in constant time, so timing says nothing about which one nearly
    matched."""
    matches = [hmac.compare_digest(given.encode(), token.encode()) for token in tokens]
    return any(matches)


class OpsSessionInterface(SecureCookieSessionInterface):
    """Flask's signed cookie session, for /ops only: other paths (the webhook, /v1) never parse or set it."""

    def open_session(self, app, request):
        if not _is_ops_path(request.path):
            return None  # Flask then uses a null session
        return super().open_session(app, request)

    def get_cookie_secure(self, app) -> bool:
        # Secure whenever the browser talks HTTPS, also behind a proxy that terminates TLS (Heroku's router sets
        # X-Forwarded-Proto). Asking for Secure can only make the cookie stricter.
        forwarded = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
        return request.is_secure or forwarded == "https"


def _is_ops_path(path: str) -> bool:
    return path == "/ops" or path.startswith("/ops/")


def install(app: Flask) -> None:
    """Register /ops on the app and its session cookie."""
    app.secret_key = session_key(settings_of(app))
    app.session_interface = OpsSessionInterface()
    app.config.update(SESSION_COOKIE_NAME=COOKIE_NAME, SESSION_COOKIE_PATH="/ops", SESSION_COOKIE_HTTPONLY=True,
                      SESSION_COOKIE_SAMESITE="Strict", PERMANENT_SESSION_LIFETIME=SESSION_LIFETIME)
    app.register_blueprint(blueprint)


def _engine():
    return engine_of(current_app)


def _configured_fingerprints() -> frozenset[bytes]:
    found = current_app.extensions.get("wa_outbox.ops_token_fingerprints")
    if found is None:
        settings = settings_of(current_app)
        found = current_app.extensions["wa_outbox.ops_token_fingerprints"] = ops_sessions.fingerprints(
            ops_sessions.signing_secret(settings), settings.api_tokens)
    return found


def _logged_in() -> bool:
    """Whether this request's cookie is a live session; a cookie that is not forgets its secret."""
    if "ops_logged_in" not in g:
        secret = session.get(SESSION_FIELD)
        g.ops_logged_in = bool(secret and ops_sessions.is_live(_engine(), secret, _configured_fingerprints()))
        if secret and not g.ops_logged_in:
            session.pop(SESSION_FIELD, None)
    return g.ops_logged_in


def _csrf_token() -> str:
    if CSRF_FIELD not in session:
        session[CSRF_FIELD] = secrets.token_urlsafe(32)
    return session[CSRF_FIELD]


def _page(template: str, status: int = 200, **context):
    if template == "login.html":
        context["dev_hint"] = dev_login_hint(settings_of(current_app))
    return render_template(f"ops/{template}", csrf_token=_csrf_token(), **context), status


def _refused(status: int, message: str):
    return _page("error.html", status, message=message)


@blueprint.before_request
def _require_session_and_csrf():
    if request.endpoint == "ops.static":
        return None
    if request.method == "POST":
        given = request.form.get(CSRF_FIELD, "")
        expected = session.get(CSRF_FIELD, "")
        if not (given and isinstance(expected, str) and expected
                and hmac.compare_digest(given.encode(), expected.encode())):
            if request.endpoint not in _OPEN_ENDPOINTS and not _logged_in():
                return _refused(401, "Not logged in (or the session expired): log in again.")
            return _refused(403, "This form is stale or did not come from this page (CSRF check failed): "
                                 "reload the page and try again.")
    if request.endpoint in _OPEN_ENDPOINTS or _logged_in():
        return None
    if request.method == "GET" and request.endpoint is not None:
        return redirect(url_for("ops.login", next=request.full_path.rstrip("?")))
    return _refused(401, "Not logged in (or the session expired): log in again.")


@blueprint.after_app_request  # by path: a 404 or 405 under /ops matched none of this blueprint's views
def _security_headers(response):
    if not _is_ops_path(request.path):
        return response
    for name, value in _SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    return response


def _next_location(default: str = "/ops") -> str:
    """Where to go after a login or an action: a path on this page only, never another site."""
    target = request.values.get("next", "")
    if _is_ops_path(target.split("?")[0]) and not target.startswith("//") and "\\" not in target:
        return target
    return default


# --- login ------------------------------------------------------------------------------------------------------

def dev_login_hint(settings: Settings) -> str | None:
    """What the login page says under `wa-outbox dev` (WA_OUTBOX_DEV): its own development token by name (public:
    config.DEV_API_TOKEN), or, when WA_OUTBOX_API_TOKENS came from the environment it started in, that it did, never
    a configured token. None outside development."""
    if not settings.dev:
        return None
    if DEV_API_TOKEN in settings.api_tokens:
        return DEV_API_TOKEN
    return ""


@blueprint.get("/login")
def login():
    return _page("login.html", next=_next_location())


@blueprint.post("/login")
def login_submit():
    throttle = auth_throttle.of(current_app)
    client = throttle.client()
    wait = throttle.retry_after(client)
    if wait is not None:  # the token is not even compared: a guess now costs the wait (auth_throttle.py)
        page, status = _page("login.html", 429, next=_next_location(),
                             error=f"Too many wrong tokens from your address: try again in {wait} s.")
        return page, status, {"Retry-After": str(wait)}
    token = request.form.get("token", "")
    settings = settings_of(current_app)
    if not token or not token_matches(token, settings.api_tokens):
        if token:
            throttle.failed(client)  # counted for the summary line, never logged one by one (nor the token)
        return _page("login.html", 401, next=_next_location(), error="That is not one of WA_OUTBOX_API_TOKENS.")
    if session.get(SESSION_FIELD):  # the browser's previous session, if any, ends here
        ops_sessions.close_session(_engine(), session[SESSION_FIELD])
    session.clear()  # a fresh session (and CSRF token) at every login: nothing planted before it survives
    session[SESSION_FIELD] = ops_sessions.open_session(
        _engine(), ops_sessions.token_fingerprint(ops_sessions.signing_secret(settings), token))
    session[CSRF_FIELD] = secrets.token_urlsafe(32)
    g.ops_logged_in = True
    log.info("ops login", extra={"remote_addr": request.remote_addr})
    return redirect(_next_location())


@blueprint.post("/logout")
def logout():
    if session.get(SESSION_FIELD):  # deleted in Postgres: a copy of this cookie is no session either
        ops_sessions.close_session(_engine(), session[SESSION_FIELD])
    session.clear()
    g.ops_logged_in = False
    return redirect(url_for("ops.login"))


# --- pages ------------------------------------------------------------------------------------------------------

@blueprint.get("")
def index():
    q = request.args.get("q")
    if q is not None and q.strip():
        return _search(q)
    engine = _engine()
    depth = ops.queue_depth(engine)
    minutes = ops.throughput(engine)
    waiting = sum(r.rows for r in depth if r.queue == "notifications" and
                  r.status in ("queued", "sending", "unknown"))
    oldest = next((r.oldest_age_seconds for r in depth
                   if r.queue == "notifications" and r.status == "queued"), None)
    labels = [m.minute.strftime("%H:%M") for m in minutes]
    by_sender = ops.sender_outcomes(engine, minutes)
    totals = ops.outcome_totals(by_sender, len(minutes))
    # What an operator asks first: how many went out and how many arrived and were read, each minute; the tone
    # colours the bars (problems in the page's warning colour).
    series = [
        ("waiting (estimated)", "line", "neutral", ops.depth_series(waiting, minutes)),
        ("sent / min", "bars", "neutral", totals["sent"]),
        ("delivered / min", "bars", "good", totals["delivered"]),
        ("read / min", "bars", "good", totals["read"]),
        ("failed / min", "bars", "bad", totals["failed"]),
        ("dead / min", "bars", "bad", totals["dead"]),
    ]
    charts = [{"name": name, "kind": kind, "tone": tone, "values": values,
               "total": sum(values) if kind == "bars" else values[-1],
               "max": max(values, default=0),
               "bars": ops.bars(values, labels) if kind == "bars" else [],
               "points": ops.line_points(values) if kind == "line" else ""}
              for name, kind, tone, values in series]
    outcomes = [{"sender": s, "totals": {o: s.total(o) for o in ops.OUTCOMES},
                 "bars": ops.bars(s.series["sent"], labels, width=120, height=20)} for s in by_sender]
    return _page("index.html", depth=depth, depth_cap=f"{ops.DEPTH_CAP:,}", waiting=waiting, oldest_age=oldest,
                 charts=charts, outcomes=outcomes,
                 delivery_rate=ops.rate(sum(totals["delivered"]), sum(totals["sent"])),
                 read_rate=ops.rate(sum(totals["read"]), sum(totals["delivered"])),
                 first_minute=labels[0] if labels else "", last_minute=labels[-1] if labels else "",
                 workers=ops.workers(engine), senders=ops.senders(engine, settings_of(current_app)),
                 dead_groups=ops.dead_groups(engine), campaigns=(shown := ops.campaigns(engine)),
                 endpoints=ops.endpoints(engine), replay_choices=REPLAY_CHOICES, unregistered=ops.unregistered(engine),
                 campaign_limits=_campaign_limits(engine, shown))


def _campaign_limits(engine, shown) -> dict[int, dict]:
    """The messaging-limit figures of the campaigns on the page that still have templates queued (issue 20)."""
    from ..portfolios import campaign_figures  # noqa: PLC0415 - as campaigns.get: accounts only when needed
    return {c.id: campaign_figures(engine, sender=c.phone_number_id, campaign_id=c.id) for c in shown
            if c.status != "cancelled" and (c.counts or {}).get("queued")}


def _search(q: str):
    try:
        terms = ops.search_terms(q)
    except ValueError as exc:
        return _page("search.html", 400, q=q[:ops.MAX_QUERY_CHARS], results=[], error=str(exc))
    results = ops.search(_engine(), terms)
    if len(results) == 1:
        return redirect(url_for("ops.message", notification_id=results[0].id, q=terms.term))
    return _page("search.html", q=terms.term, results=results, error=None)


@blueprint.get("/messages/<int:notification_id>")
def message(notification_id: int):
    found = queries.get_notification(_engine(), id=notification_id) if notification_id <= ops.MAX_ID else None
    if found is None:
        return _page("search.html", 404, q=request.args.get("q", str(notification_id)), results=[],
                     error=f"No message {notification_id}.")
    return _page("message.html", m=found, q=request.args.get("q", ""))


# --- actions ------------------------------------------------------------------------------------------------------

@blueprint.post("/messages/<int:notification_id>/retry")
def retry_message(notification_id: int):
    if notification_id <= ops.MAX_ID and outbox.requeue(_engine(), ids=[notification_id], actor="ops"):
        flash(f"Message {notification_id} requeued.")
    else:
        flash(f"Message {notification_id} was not requeued: only dead or failed messages are.", "error")
    return redirect(_next_location(url_for("ops.message", notification_id=notification_id)))


@blueprint.post("/messages/<int:notification_id>/purge")
def purge_message(notification_id: int):
    if notification_id <= ops.MAX_ID and outbox.purge_dead(_engine(), ids=[notification_id]):
        flash(f"Message {notification_id} and its timeline deleted.")
        return redirect(_next_location())
    flash(f"Message {notification_id} was not deleted: only dead messages are purged.", "error")
    return redirect(_next_location(url_for("ops.message", notification_id=notification_id)))


def _group_form() -> tuple[str, int]:
    code = request.form.get("code", "")
    try:
        up_to_id = int(request.form.get("up_to_id", ""))
    except ValueError:
        abort(400, "up_to_id must be a message id")
    if len(code) > 100 or "\x00" in code or not 0 < up_to_id <= ops.MAX_ID:
        abort(400, "code must be a short text and up_to_id a message id")
    return code, up_to_id


@blueprint.post("/dead/retry")
def retry_group():
    code, up_to_id = _group_form()
    count = ops.retry_dead_group(_engine(), code=code, up_to_id=up_to_id, actor="ops")
    flash(f"{count} dead message(s) with code {code or '(none)'} requeued.")
    return redirect(_next_location())


@blueprint.post("/dead/purge")
def purge_group():
    code, up_to_id = _group_form()
    count = ops.purge_dead_group(_engine(), code=code, up_to_id=up_to_id)
    flash(f"{count} dead message(s) with code {code or '(none)'} deleted with their timelines.")
    return redirect(_next_location())


@blueprint.post("/senders/resume")
def resume_sender():
    phone_number_id = request.form.get("phone_number_id", "")
    if not phone_number_id.isascii() or not phone_number_id.isdigit() or len(phone_number_id) > 64:
        abort(400, "phone_number_id must be digits")
    resumed = queries.resume_sender(_engine(), phone_number_id=phone_number_id)
    flash(f"Sender {phone_number_id} resumed; {resumed.moved} message(s) it held back are due now.")
    return redirect(_next_location())


@blueprint.post("/campaigns/<any(pause, resume, cancel):action>")
def steer_campaign(action: str):
    """Pause, resume or cancel a campaign, as `wa-outbox campaign …` does; the timeline names the session."""
    name = request.form.get("name", "")
    if not name or len(name) > 200:
        abort(400, "name must be a campaign's name")
    try:
        result = campaigns.steer(_engine(), name, action, actor="ops")
    except campaigns.CampaignError as exc:  # unknown, or not possible in the campaign's state
        flash(str(exc), "error")
        return redirect(_next_location())
    flash(f"Campaign {name}: {result.previous_status} → {result.status} ({result.moved} message(s)).")
    return redirect(_next_location())


# The replay form's choices: its value is what endpoints.replay takes as `since` ("failed": failed_only).
REPLAY_CHOICES = {"failed": "failed deliveries", "1h": "last hour", "24h": "last 24 hours", "7d": "last 7 days"}


def _endpoint_form() -> str:
    endpoint_id = request.form.get("endpoint_id", "")
    if not endpoints.is_endpoint_id(endpoint_id):
        abort(400, "endpoint_id must be an endpoint's id")
    return endpoint_id


@blueprint.post("/endpoints/replay")
def replay_endpoint():
    """Replay an endpoint's failed deliveries or its events since a time, as `wa-outbox endpoints replay` does."""
    endpoint_id = _endpoint_form()
    choice = request.form.get("what", "")
    if choice not in REPLAY_CHOICES:
        abort(400, f"what must be one of {', '.join(REPLAY_CHOICES)}")
    try:
        result = endpoints.replay(_engine(), endpoint_id, since=None if choice == "failed" else choice,
                                  failed_only=choice == "failed")
    except endpoints.EndpointError as exc:
        flash(str(exc), "error")
        return redirect(_next_location())
    flash(f"Endpoint {endpoint_id}: {result.requeued + result.inserted} deliveries queued "
          f"({REPLAY_CHOICES[choice]}).")
    return redirect(_next_location())


@blueprint.post("/endpoints/enable")
def enable_endpoint():
    endpoint_id = _endpoint_form()
    try:
        result = endpoints.enable(_engine(), endpoint_id)
    except endpoints.EndpointError as exc:
        flash(str(exc), "error")
        return redirect(_next_location())
    flash(f"Endpoint {endpoint_id}: {result.previous_state} → {result.state}.")
    return redirect(_next_location())


# --- template helpers ---------------------------------------------------------------------------------------------

@blueprint.app_template_filter("ops_age")
def _age(seconds: Any) -> str:
    """Seconds as a short readable duration: 42 s, 3 m 05 s, 2 h 10 m, 3 d 4 h."""
    if seconds is None:
        return "–"
    s = int(float(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} m {s % 60:02d} s"
    if s < 86400:
        return f"{s // 3600} h {s % 3600 // 60:02d} m"
    return f"{s // 86400} d {s % 86400 // 3600} h"


@blueprint.app_template_filter("ops_time")
def _time(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, str):
        try:
            value = datetime.datetime.fromisoformat(value)
        except ValueError:
            return value
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + " UTC"


@blueprint.app_template_filter("ops_phone")
def _phone(value: Any) -> str:
    """A phone number as the CLI prints it (messages.format_phone)."""
    return format_phone(value if value is None else str(value))


@blueprint.app_template_filter("ops_hold_reason")
def _hold_reason(value: str) -> str:
    """What holds a queued message, as the CLI's `status` says it (states.hold_reason_text)."""
    return hold_reason_text(value)


@blueprint.app_template_filter("ops_rate")
def _rate(value: float | None) -> str:
    """A rate (ops.rate) as a percentage: 97.4 %, – without a whole to divide by."""
    return "–" if value is None else f"{value * 100:.1f} %"


@blueprint.app_template_filter("ops_queue")
def _queue(queue: str) -> str:
    return ops.queue_label(queue)


@blueprint.app_template_filter("ops_activity")
def _activity(info: Any) -> list[ops.Activity]:
    return ops.worker_activity(info if isinstance(info, dict) else {})


@blueprint.app_template_filter("ops_json")
def _json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


@blueprint.context_processor
def _flashes():
    return {"flashes": get_flashed_messages(with_categories=True), "logged_in": _logged_in()}


# --- templates (issue 20) --------------------------------------------------------------------------------------------
@blueprint.context_processor
def _templates_section():
    """The templates section of /ops: a callable, so only the page that shows it reads them (index.html)."""
    def ops_templates() -> list[queries.TemplateRow]:
        return queries.templates_list(_engine(), limit=200)
    return {"ops_templates": ops_templates}
