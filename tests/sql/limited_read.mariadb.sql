-- limited_read on mariadb (pymysql, capabilities: skip_locked)
-- parameters: coalesce_1='', param_1=0, param_2=1, execution_status_1='finished', execution_status_2='failed', execution_status_3='working', utc_timestamp_1=6, execution_status_4='unfinished', utc_timestamp_2=6, dbw_mark, param_3=128, param_4=1, execution_status_5='working', execution_status_6='unfinished', param_5=128
SELECT anon_1.id, anon_1.dbw_k0, anon_1.dbw_part
FROM (SELECT anon_2.id AS id, anon_2.dbw_k0 AS dbw_k0, anon_2.dbw_part AS dbw_part
FROM (SELECT items.id AS id, coalesce(CAST(items.priority AS CHAR), %(coalesce_1)s) AS dbw_k0, %(param_1)s AS dbw_part
FROM items
WHERE NOT (EXISTS (SELECT %(param_2)s AS anon_3
FROM items_work
WHERE items_work.source_id = items.id AND (items_work.execution_status = %(execution_status_1)s OR items_work.execution_status = %(execution_status_2)s OR items_work.execution_status = %(execution_status_3)s AND items_work.lease_expires_at > utc_timestamp(%(utc_timestamp_1)s) OR items_work.execution_status = %(execution_status_4)s AND items_work.not_before > utc_timestamp(%(utc_timestamp_2)s)))) AND items.id >= %(dbw_mark)s ORDER BY items.id
 LIMIT %(param_3)s) AS anon_2 UNION ALL SELECT anon_4.id AS id, anon_4.dbw_k0 AS dbw_k0, anon_4.dbw_part AS dbw_part
FROM (SELECT items.id AS id, coalesce(CAST(items.priority AS CHAR), %(coalesce_1)s) AS dbw_k0, %(param_4)s AS dbw_part
FROM items
WHERE NOT (EXISTS (SELECT %(param_2)s AS anon_3
FROM items_work
WHERE items_work.source_id = items.id AND (items_work.execution_status = %(execution_status_1)s OR items_work.execution_status = %(execution_status_2)s OR items_work.execution_status = %(execution_status_3)s AND items_work.lease_expires_at > utc_timestamp(%(utc_timestamp_1)s) OR items_work.execution_status = %(execution_status_4)s AND items_work.not_before > utc_timestamp(%(utc_timestamp_2)s)))) AND items.id < %(dbw_mark)s AND items.id IN (SELECT items_work.source_id
FROM items_work
WHERE (items_work.execution_status = %(execution_status_5)s OR items_work.execution_status = %(execution_status_6)s) AND items_work.source_id < %(dbw_mark)s) ORDER BY items.id
 LIMIT %(param_5)s) AS anon_4) AS anon_1 ORDER BY anon_1.id
