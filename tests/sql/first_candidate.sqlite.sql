-- first_candidate on sqlite (pysqlite, capabilities: none)
-- parameters: param_1=1, execution_status_1='finished', execution_status_2='failed', execution_status_3='working', strftime_1='%Y-%m-%d %H:%M:%f000', strftime_2='now', strftime_3='+0 seconds', execution_status_4='unfinished', strftime_4='%Y-%m-%d %H:%M:%f000', strftime_5='now', strftime_6='+0 seconds', dbw_after, param_2=1, param_3=0
SELECT items.id
FROM items
WHERE items.ready = 1 AND NOT (EXISTS (SELECT ? AS anon_1
FROM items_work
WHERE items_work.source_id = items.id AND (items_work.execution_status = ? OR items_work.execution_status = ? OR items_work.execution_status = ? AND items_work.lease_expires_at > strftime(?, ?, ?) OR items_work.execution_status = ? AND items_work.not_before > strftime(?, ?, ?)))) AND items.id >= __[POSTCOMPILE_dbw_after] ORDER BY items.id
 LIMIT ? OFFSET ?
