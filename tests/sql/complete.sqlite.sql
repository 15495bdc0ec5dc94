-- complete on sqlite (pysqlite, capabilities: none)
-- parameters: dbw_status, claim_token=None, lease_expires_at=None, dbw_error, not_before=None, traceback=None, dbw_sid, dbw_token, execution_status_1='working'
UPDATE items_work SET execution_status=?, claim_token=?, lease_expires_at=?, error=?, not_before=?, traceback=? WHERE items_work.source_id = ? AND items_work.claim_token = ? AND items_work.execution_status = ?
