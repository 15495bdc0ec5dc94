-- load_source on postgresql (psycopg, capabilities: skip_locked, lock_of, gen_random_uuid)
-- parameters: dbw_key
SELECT items.id, items.ready, items.priority
FROM items
WHERE items.id = %(dbw_key)s::INTEGER
