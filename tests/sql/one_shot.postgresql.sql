-- one_shot on postgresql (psycopg, capabilities: skip_locked, lock_of, gen_random_uuid)
-- parameters: set_config_1='synchronous_commit', set_config_2='off', param_1=1, execution_status_1='finished', execution_status_2='failed', execution_status_3='working', timezone_1='UTC', execution_status_4='unfinished', timezone_2='UTC', dbw_limit, param_2='working', timezone_3='UTC', make_interval_1=0, make_interval_2=0, make_interval_3=0, make_interval_4=0, make_interval_5=0, make_interval_6=0, dbw_lease, param_3=1, dbw_claimer, param_4='working', param_5=None, attempts_1=1, param_6=None, execution_status_5='unfinished', timezone_4='UTC', execution_status_6='working', timezone_5='UTC'
WITH dbw_candidates AS
(SELECT items.id AS id, (SELECT items_work.execution_status
FROM items_work
WHERE items_work.source_id = items.id) AS dbw_previous, set_config(%(set_config_1)s::VARCHAR, %(set_config_2)s::VARCHAR, true) AS dbw_relax
FROM items
WHERE NOT (EXISTS (SELECT %(param_1)s::INTEGER AS anon_1
FROM items_work
WHERE items_work.source_id = items.id AND (items_work.execution_status = %(execution_status_1)s::VARCHAR OR items_work.execution_status = %(execution_status_2)s::VARCHAR OR items_work.execution_status = %(execution_status_3)s::VARCHAR AND items_work.lease_expires_at > timezone(%(timezone_1)s::VARCHAR, statement_timestamp()) OR items_work.execution_status = %(execution_status_4)s::VARCHAR AND items_work.not_before > timezone(%(timezone_2)s::VARCHAR, statement_timestamp())))) ORDER BY items.id
 LIMIT %(dbw_limit)s::INTEGER FOR UPDATE OF items SKIP LOCKED),
dbw_taken AS
(INSERT INTO items_work (source_id, execution_status, claim_token, lease_expires_at, error, attempts, claimed_by) SELECT dbw_candidates.id AS id, %(param_2)s::VARCHAR AS anon_2, CAST(gen_random_uuid() AS VARCHAR) AS gen_random_uuid_1, timezone(%(timezone_3)s::VARCHAR, statement_timestamp()) + make_interval(%(make_interval_1)s::INTEGER, %(make_interval_2)s::INTEGER, %(make_interval_3)s::INTEGER, %(make_interval_4)s::INTEGER, %(make_interval_5)s::INTEGER, %(make_interval_6)s::INTEGER, %(dbw_lease)s) AS anon_3, NULL AS anon_4, %(param_3)s::INTEGER AS anon_5, %(dbw_claimer)s::VARCHAR AS anon_6
FROM dbw_candidates ON CONFLICT (source_id) DO UPDATE SET execution_status = %(param_4)s::VARCHAR, claim_token = excluded.claim_token, lease_expires_at = excluded.lease_expires_at, error = %(param_5)s::VARCHAR, attempts = (items_work.attempts + %(attempts_1)s::INTEGER), not_before = %(param_6)s::TIMESTAMP WITHOUT TIME ZONE, claimed_by = excluded.claimed_by WHERE items_work.execution_status = %(execution_status_5)s::VARCHAR AND (items_work.not_before IS NULL OR items_work.not_before <= timezone(%(timezone_4)s::VARCHAR, statement_timestamp())) OR items_work.execution_status = %(execution_status_6)s::VARCHAR AND (items_work.lease_expires_at IS NULL OR items_work.lease_expires_at <= timezone(%(timezone_5)s::VARCHAR, statement_timestamp())) RETURNING items_work.source_id, items_work.claim_token)
 SELECT dbw_candidates.id, dbw_taken.claim_token, dbw_candidates.dbw_previous
FROM dbw_candidates LEFT OUTER JOIN dbw_taken ON dbw_taken.source_id = dbw_candidates.id ORDER BY dbw_candidates.id
