-- first on mysql (pymysql, capabilities: skip_locked, lock_of)
-- parameters: dbw_sid, execution_status='working', dbw_token, dbw_lease, utc_timestamp_1=6, error=None, attempts=1, dbw_claimer, utc_timestamp_2=6
INSERT IGNORE INTO items_work (source_id, execution_status, claim_token, lease_expires_at, error, attempts, claimed_by, changed_at) VALUES (%(dbw_sid)s, %(execution_status)s, %(dbw_token)s, timestampadd(MICROSECOND, %(dbw_lease)s, utc_timestamp(%(utc_timestamp_1)s)), %(error)s, %(attempts)s, %(dbw_claimer)s, utc_timestamp(%(utc_timestamp_2)s))
