-- first on sqlite (pysqlite, capabilities: none)
-- parameters: dbw_sid, execution_status='working', dbw_token, strftime_1='%Y-%m-%d %H:%M:%f000', strftime_2='now', dbw_lease, error=None, attempts=1, dbw_claimer, strftime_3='%Y-%m-%d %H:%M:%f000', strftime_4='now', strftime_5='+0 seconds'
INSERT INTO items_work (source_id, execution_status, claim_token, lease_expires_at, error, attempts, claimed_by, changed_at) VALUES (?, ?, ?, strftime(?, ?, ?), ?, ?, ?, strftime(?, ?, ?)) ON CONFLICT (source_id) DO NOTHING
