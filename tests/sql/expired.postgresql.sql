-- expired on postgresql (psycopg, capabilities: skip_locked, lock_of, gen_random_uuid)
-- parameters: timezone_1='UTC', execution_status_1='working', dbw_limit
SELECT items_work.source_id
FROM items_work
WHERE items_work.lease_expires_at <= timezone(%(timezone_1)s::VARCHAR, statement_timestamp()) AND items_work.execution_status = %(execution_status_1)s::VARCHAR
 LIMIT %(dbw_limit)s::INTEGER
