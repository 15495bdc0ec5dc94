-- first_candidate on mariadb (pymysql, capabilities: skip_locked)
-- parameters: param_1=1, execution_status_1='finished', execution_status_2='failed', execution_status_3='working', utc_timestamp_1=6, execution_status_4='unfinished', utc_timestamp_2=6, dbw_after, param_2=1
SELECT items.id
FROM items
WHERE items.ready = 1 AND NOT (EXISTS (SELECT %(param_1)s AS anon_1
FROM items_work
WHERE items_work.source_id = items.id AND (items_work.execution_status = %(execution_status_1)s OR items_work.execution_status = %(execution_status_2)s OR items_work.execution_status = %(execution_status_3)s AND items_work.lease_expires_at > utc_timestamp(%(utc_timestamp_1)s) OR items_work.execution_status = %(execution_status_4)s AND items_work.not_before > utc_timestamp(%(utc_timestamp_2)s)))) AND items.id >= __[POSTCOMPILE_dbw_after] ORDER BY items.id
 LIMIT %(param_2)s
