-- Schema 0015: an inbound media gives up as `failed` after MAX_CORRUPT_ATTEMPTS downloads whose bytes were not the
-- ones Meta declared, counted on their own: until now the count was every attempt, so a file whose attempts went on
-- 503s, outages and a dead worker's lease failed at its first wrong checksum. Adding a column with a constant default
-- rewrites nothing (PostgreSQL 11+): the ACCESS EXCLUSIVE lock on media lasts a moment.
ALTER TABLE wa_outbox.media ADD COLUMN corrupt_fetches integer NOT NULL DEFAULT 0 CHECK (corrupt_fetches >= 0);
