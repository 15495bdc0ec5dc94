-- expired on sqlite (pysqlite, capabilities: none)
-- parameters: strftime_1='%Y-%m-%d %H:%M:%f000', strftime_2='now', strftime_3='+0 seconds', execution_status_1='working', dbw_limit, param_1=0
SELECT items_work.source_id
FROM items_work
WHERE items_work.lease_expires_at <= strftime(?, ?, ?) AND items_work.execution_status = ?
 LIMIT ? OFFSET ?
