-- step_over on sqlite (pysqlite, capabilities: none)
-- parameters: execution_status='unfinished', claim_token=None, lease_expires_at=None, error=None, attempts=0, not_before=None, traceback=None, dbw_sid, dbw_token, execution_status_1='working'
UPDATE items_work SET execution_status=?, claim_token=?, lease_expires_at=?, error=?, attempts=?, not_before=?, traceback=? WHERE items_work.source_id = ? AND items_work.claim_token = ? AND items_work.execution_status = ?
