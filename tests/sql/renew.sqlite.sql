-- renew on sqlite (pysqlite, capabilities: none)
-- parameters: strftime_1='%Y-%m-%d %H:%M:%f000', strftime_2='now', dbw_lease, dbw_sid, dbw_token, execution_status_1='working'
UPDATE items_work SET lease_expires_at=strftime(?, ?, ?) WHERE items_work.source_id = ? AND items_work.claim_token = ? AND items_work.execution_status = ?
