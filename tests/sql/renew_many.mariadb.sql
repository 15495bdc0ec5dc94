-- renew_many on mariadb (pymysql, capabilities: skip_locked)
-- parameters: dbw_lease, utc_timestamp_1=6, dbw_sids, dbw_tokens, execution_status_1='working'
UPDATE items_work FORCE INDEX (PRIMARY) SET lease_expires_at=timestampadd(MICROSECOND, %(dbw_lease)s, utc_timestamp(%(utc_timestamp_1)s)) WHERE items_work.source_id IN (__[POSTCOMPILE_dbw_sids]) AND items_work.claim_token IN (__[POSTCOMPILE_dbw_tokens]) AND items_work.execution_status = %(execution_status_1)s
