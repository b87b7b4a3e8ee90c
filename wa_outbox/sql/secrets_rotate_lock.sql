-- `wa-outbox secrets rotate-key`, first in its transaction: no secret is stored or replaced while every stored one is
-- re-encrypted (a row written meanwhile under an old key would be missed). Readers (webhooks, sends) are not blocked;
-- the tables hold a few hundred rows, so the lock is held for milliseconds.
LOCK TABLE wa_outbox.app_secrets, wa_outbox.senders, wa_outbox.endpoints IN SHARE ROW EXCLUSIVE MODE
