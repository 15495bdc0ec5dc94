-- lookup on postgresql (psycopg, capabilities: skip_locked, lock_of, gen_random_uuid)
-- parameters: worker_1='items', timezone_1='UTC', timezone_2='UTC', make_interval_1=0, make_interval_2=0, make_interval_3=0, make_interval_4=0, make_interval_5=0, make_interval_6=0, param_1=-60.0, param_2=datetime.datetime(9999, 12, 31, 23, 59, 59, 999999), param_3=64
SELECT dbw_anchor.dbw_paused, dbw_anchor.dbw_now, dbw_waiting.source_id, dbw_waiting.not_before
FROM (SELECT EXISTS (SELECT *
FROM dbworker_paused
WHERE dbworker_paused.worker = %(worker_1)s::VARCHAR) AS dbw_paused, timezone(%(timezone_1)s::VARCHAR, statement_timestamp()) AS dbw_now) AS dbw_anchor LEFT OUTER JOIN (SELECT items_work.source_id AS source_id, items_work.not_before AS not_before
FROM items_work
WHERE items_work.not_before > timezone(%(timezone_2)s::VARCHAR, statement_timestamp()) + make_interval(%(make_interval_1)s::INTEGER, %(make_interval_2)s::INTEGER, %(make_interval_3)s::INTEGER, %(make_interval_4)s::INTEGER, %(make_interval_5)s::INTEGER, %(make_interval_6)s::INTEGER, %(param_1)s) AND items_work.not_before <= %(param_2)s::TIMESTAMP WITHOUT TIME ZONE ORDER BY items_work.not_before
 LIMIT %(param_3)s::INTEGER) AS dbw_waiting ON true ORDER BY dbw_waiting.not_before
