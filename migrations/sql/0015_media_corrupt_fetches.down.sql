-- Version 14: no count of corrupt downloads (every attempt counts towards MAX_CORRUPT_ATTEMPTS).
ALTER TABLE wa_outbox.media DROP COLUMN corrupt_fetches;
