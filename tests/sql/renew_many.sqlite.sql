-- renew_many on sqlite (pysqlite, capabilities: none)
-- parameters: strftime_1='%Y-%m-%d %H:%M:%f000', strftime_2='now', dbw_lease, dbw_sids, dbw_tokens, execution_status_1='working'
UPDATE items_work SET lease_expires_at=strftime(?, ?, ?) WHERE items_work.source_id IN (__[POSTCOMPILE_dbw_sids]) AND items_work.claim_token IN (__[POSTCOMPILE_dbw_tokens]) AND items_work.execution_status = ?
