-- The bytes of an outbound file are in its store: their size, sha256 and (s3) key, in the same transaction.
UPDATE wa_outbox.media
SET size = %(size)s, sha256 = %(sha256)s, store = %(store)s, store_key = %(store_key)s, stored_at = now()
WHERE id = %(id)s AND direction = 'outbound'
