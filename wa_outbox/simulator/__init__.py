"""A fake WhatsApp Cloud API (Graph API) for development and tests: wa-outbox's reliability is tested against it.

It behaves like Meta's where a sender's correctness depends on it: `POST /{version}/{phone_number_id}/messages`
checks the bearer token and validates the body against Meta's own OpenAPI schema, answers with Meta's success and
error shapes, enforces the per-number and per-recipient throughput limits, and then posts signed status webhooks
(sent, delivered, read, or failed) that can come late, twice, out of order or batched. Fault rules inject latency,
5xx answers, any Graph error code, timeouts and lost responses, deterministically when a test needs it.

    from wa_outbox.simulator import SimulatorServer
    with SimulatorServer(access_token="t", app_secret="s", webhook_url=...) as sim:
        ...  # point WHATSAPP_API_BASE_URL at sim.base_url

Modules: server (HTTP and `SimulatorServer`), core (the behaviour), validation (the schema), faults, limits,
webhooks, errors (Meta's error texts), admin (`/_admin/` endpoints), config, cli (`wa-outbox simulator`).
"""

from .config import PairLimit, SimulatorConfig
from .server import SimulatorServer

__all__ = ["PairLimit", "SimulatorConfig", "SimulatorServer"]
