-- first on postgresql (psycopg, capabilities: skip_locked, lock_of, gen_random_uuid)
-- parameters: dbw_sid, param_1='working', dbw_token, timezone_1='UTC', make_interval_1=0, make_interval_2=0, make_interval_3=0, make_interval_4=0, make_interval_5=0, make_interval_6=0, dbw_lease, param_2=1, dbw_claimer, timezone_3='UTC'
INSERT INTO items_work (source_id, execution_status, claim_token, lease_expires_at, error, attempts, claimed_by, changed_at) SELECT %(dbw_sid)s::INTEGER AS anon_1, %(param_1)s::VARCHAR AS anon_2, %(dbw_token)s::VARCHAR AS anon_3, timezone(%(timezone_1)s::VARCHAR, statement_timestamp()) + make_interval(%(make_interval_1)s::INTEGER, %(make_interval_2)s::INTEGER, %(make_interval_3)s::INTEGER, %(make_interval_4)s::INTEGER, %(make_interval_5)s::INTEGER, %(make_interval_6)s::INTEGER, %(dbw_lease)s) AS anon_4, NULL AS anon_5, %(param_2)s::INTEGER AS anon_6, %(dbw_claimer)s::VARCHAR AS anon_7, timezone(%(timezone_3)s::VARCHAR, statement_timestamp()) AS timezone_2
WHERE NOT (EXISTS (SELECT *
FROM items_work
WHERE items_work.source_id = %(dbw_sid)s::INTEGER)) ON CONFLICT (source_id) DO NOTHING RETURNING items_work.source_id
