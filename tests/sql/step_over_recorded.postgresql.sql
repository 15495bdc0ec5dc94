-- step_over_recorded on postgresql (psycopg, capabilities: skip_locked, lock_of, gen_random_uuid)
-- parameters: param_1='unfinished', param_2=None, param_3=None, param_4=None, param_5=0, param_6=None, param_7=None, dbw_sid, dbw_token, execution_status_1='working', dbw_started, timezone_1='UTC', dbw_outcome, dbw_claimer
WITH dbw_done AS
(UPDATE items_work SET execution_status=%(param_1)s::VARCHAR, claim_token=%(param_2)s::VARCHAR, lease_expires_at=%(param_3)s::TIMESTAMP WITHOUT TIME ZONE, error=%(param_4)s::VARCHAR, attempts=%(param_5)s::INTEGER, not_before=%(param_6)s::TIMESTAMP WITHOUT TIME ZONE, traceback=%(param_7)s::VARCHAR WHERE items_work.source_id = %(dbw_sid)s::INTEGER AND items_work.claim_token = %(dbw_token)s::VARCHAR AND items_work.execution_status = %(execution_status_1)s::VARCHAR RETURNING items_work.source_id)
 INSERT INTO items_history (source_id, started_at, ended_at, outcome, claimed_by) SELECT dbw_done.source_id, %(dbw_started)s::TIMESTAMP WITHOUT TIME ZONE AS anon_1, timezone(%(timezone_1)s::VARCHAR, statement_timestamp()) AS dbworker_server_now_1, %(dbw_outcome)s::VARCHAR AS anon_2, %(dbw_claimer)s::VARCHAR AS anon_3
FROM dbw_done
