-- `wa-outbox db query` (read-only), first in its READ ONLY transaction: the statement and lock timeouts, and the
-- role to run as (SET LOCAL ROLE, when one is given), all for this transaction only (PgBouncer-safe).
-- Safe to repeat: sets transaction-local settings only.
SELECT set_config('statement_timeout', %(statement_timeout)s, true),
       set_config('lock_timeout', %(lock_timeout)s, true),
       CASE WHEN %(role)s::text IS NOT NULL THEN set_config('role', %(role)s::text, true) END
