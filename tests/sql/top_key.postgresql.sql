-- top_key on postgresql (psycopg, capabilities: skip_locked, lock_of, gen_random_uuid)
-- parameters: none
SELECT max(items.id) AS max_1
FROM items
