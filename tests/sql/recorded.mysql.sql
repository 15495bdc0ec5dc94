-- recorded on mysql (pymysql, capabilities: skip_locked, lock_of)
-- parameters: execution_status_1='unfinished', utc_timestamp_1=6, execution_status_2='working', utc_timestamp_2=6, dbw_sids
SELECT items_work.source_id, items_work.execution_status = %(execution_status_1)s AND (items_work.not_before IS NULL OR items_work.not_before <= utc_timestamp(%(utc_timestamp_1)s)) AS dbw_again, items_work.execution_status = %(execution_status_2)s AND (items_work.lease_expires_at IS NULL OR items_work.lease_expires_at <= utc_timestamp(%(utc_timestamp_2)s)) AS dbw_over
FROM items_work
WHERE items_work.source_id IN (__[POSTCOMPILE_dbw_sids])
