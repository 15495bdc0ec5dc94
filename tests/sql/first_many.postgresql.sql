-- first_many on postgresql (psycopg, capabilities: skip_locked, lock_of, gen_random_uuid)
-- parameters: param_1='working', timezone_1='UTC', make_interval_1=0, make_interval_2=0, make_interval_3=0, make_interval_4=0, make_interval_5=0, make_interval_6=0, dbw_lease, param_2=1, dbw_claimer, timezone_3='UTC', dbw_sids, dbw_tokens
INSERT INTO items_work (source_id, execution_status, claim_token, lease_expires_at, error, attempts, claimed_by, changed_at) SELECT dbw_new.sid, %(param_1)s::VARCHAR AS anon_1, dbw_new.token, timezone(%(timezone_1)s::VARCHAR, statement_timestamp()) + make_interval(%(make_interval_1)s::INTEGER, %(make_interval_2)s::INTEGER, %(make_interval_3)s::INTEGER, %(make_interval_4)s::INTEGER, %(make_interval_5)s::INTEGER, %(make_interval_6)s::INTEGER, %(dbw_lease)s) AS anon_2, NULL AS anon_3, %(param_2)s::INTEGER AS anon_4, %(dbw_claimer)s::VARCHAR AS anon_5, timezone(%(timezone_3)s::VARCHAR, statement_timestamp()) AS timezone_2
FROM (SELECT unnest(%(dbw_sids)s::INTEGER[]) AS sid, unnest(%(dbw_tokens)s::VARCHAR[]) AS token) AS dbw_new
WHERE NOT (EXISTS (SELECT *
FROM items_work
WHERE items_work.source_id = dbw_new.sid)) ON CONFLICT (source_id) DO NOTHING RETURNING items_work.source_id
