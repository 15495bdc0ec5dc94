-- renew on mariadb (pymysql, capabilities: skip_locked)
-- parameters: dbw_lease, utc_timestamp_1=6, dbw_sid, dbw_token, execution_status_1='working'
UPDATE items_work SET lease_expires_at=timestampadd(MICROSECOND, %(dbw_lease)s, utc_timestamp(%(utc_timestamp_1)s)) WHERE items_work.source_id = %(dbw_sid)s AND items_work.claim_token = %(dbw_token)s AND items_work.execution_status = %(execution_status_1)s
