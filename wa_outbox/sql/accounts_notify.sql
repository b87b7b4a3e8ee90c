-- Tell the web and the workers that the registry changed (accounts.py issues it last in the transaction of every
-- change, so it is delivered at commit, or never): they LISTEN on wa_outbox_registry (or poll) and reload it
-- (registry.load). No payload: a reload reads everything, and a payload could only ever name ids, never secrets.
-- Safe to repeat: a second notification only causes a second reload.
SELECT pg_notify('wa_outbox_registry', '')
