-- How many senders are registered and when a token last changed: the worker's start-up check (it may start without
-- WHATSAPP_ACCESS_TOKEN once a sender is registered) and, without LISTEN (WA_OUTBOX_LISTEN=false), its cheap test
-- per claim batch of whether its cached tokens are stale (worker/_tokens.py).
-- Safe to repeat: it only reads.
SELECT count(*) AS senders, max(token_updated_at) AS tokens_updated_at FROM wa_outbox.senders
