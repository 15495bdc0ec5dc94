-- complete on mysql (pymysql, capabilities: skip_locked, lock_of)
-- parameters: dbw_status, claim_token=None, lease_expires_at=None, dbw_error, not_before=None, traceback=None, dbw_sid, dbw_token, execution_status_1='working'
UPDATE items_work SET execution_status=%(dbw_status)s, claim_token=%(claim_token)s, lease_expires_at=%(lease_expires_at)s, error=%(dbw_error)s, not_before=%(not_before)s, traceback=%(traceback)s WHERE items_work.source_id = %(dbw_sid)s AND items_work.claim_token = %(dbw_token)s AND items_work.execution_status = %(execution_status_1)s
