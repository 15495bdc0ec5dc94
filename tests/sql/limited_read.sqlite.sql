-- limited_read on sqlite (pysqlite, capabilities: none)
-- parameters: coalesce_1='', param_1=0, param_2=1, execution_status_1='finished', execution_status_2='failed', execution_status_3='working', strftime_1='%Y-%m-%d %H:%M:%f000', strftime_2='now', strftime_3='+0 seconds', execution_status_4='unfinished', strftime_4='%Y-%m-%d %H:%M:%f000', strftime_5='now', strftime_6='+0 seconds', dbw_mark, param_3=128, param_4=0, coalesce_1='', param_5=1, param_2=1, execution_status_1='finished', execution_status_2='failed', execution_status_3='working', strftime_1='%Y-%m-%d %H:%M:%f000', strftime_2='now', strftime_3='+0 seconds', execution_status_4='unfinished', strftime_4='%Y-%m-%d %H:%M:%f000', strftime_5='now', strftime_6='+0 seconds', dbw_mark, execution_status_5='working', execution_status_6='unfinished', dbw_mark, param_6=128, param_7=0
SELECT anon_1.id, anon_1.dbw_k0, anon_1.dbw_part
FROM (SELECT anon_2.id AS id, anon_2.dbw_k0 AS dbw_k0, anon_2.dbw_part AS dbw_part
FROM (SELECT items.id AS id, coalesce(CAST(items.priority AS VARCHAR), ?) AS dbw_k0, ? AS dbw_part
FROM items
WHERE NOT (EXISTS (SELECT ? AS anon_3
FROM items_work
WHERE items_work.source_id = items.id AND (items_work.execution_status = ? OR items_work.execution_status = ? OR items_work.execution_status = ? AND items_work.lease_expires_at > strftime(?, ?, ?) OR items_work.execution_status = ? AND items_work.not_before > strftime(?, ?, ?)))) AND items.id >= ? ORDER BY items.id
 LIMIT ? OFFSET ?) AS anon_2 UNION ALL SELECT anon_4.id AS id, anon_4.dbw_k0 AS dbw_k0, anon_4.dbw_part AS dbw_part
FROM (SELECT items.id AS id, coalesce(CAST(items.priority AS VARCHAR), ?) AS dbw_k0, ? AS dbw_part
FROM items
WHERE NOT (EXISTS (SELECT ? AS anon_3
FROM items_work
WHERE items_work.source_id = items.id AND (items_work.execution_status = ? OR items_work.execution_status = ? OR items_work.execution_status = ? AND items_work.lease_expires_at > strftime(?, ?, ?) OR items_work.execution_status = ? AND items_work.not_before > strftime(?, ?, ?)))) AND items.id < ? AND items.id IN (SELECT items_work.source_id
FROM items_work
WHERE (items_work.execution_status = ? OR items_work.execution_status = ?) AND items_work.source_id < ?) ORDER BY items.id
 LIMIT ? OFFSET ?) AS anon_4) AS anon_1 ORDER BY anon_1.id
