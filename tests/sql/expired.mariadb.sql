-- expired on mariadb (pymysql, capabilities: skip_locked)
-- parameters: utc_timestamp_1=6, execution_status_1='working', dbw_limit
SELECT items_work.source_id
FROM items_work
WHERE items_work.lease_expires_at <= utc_timestamp(%(utc_timestamp_1)s) AND items_work.execution_status = %(execution_status_1)s
 LIMIT %(dbw_limit)s
