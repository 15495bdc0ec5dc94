-- lookup on sqlite (pysqlite, capabilities: none)
-- parameters: worker_1='items', strftime_1='%Y-%m-%d %H:%M:%f000', strftime_2='now', strftime_3='+0 seconds', strftime_4='%Y-%m-%d %H:%M:%f000', strftime_5='now', param_1='-60.000000 seconds', substr_1=5, substr_2=1, substr_3='-', param_2=64, param_3=0
SELECT dbw_anchor.dbw_paused, dbw_anchor.dbw_now, dbw_waiting.source_id, dbw_waiting.not_before
FROM (SELECT EXISTS (SELECT *
FROM dbworker_paused
WHERE dbworker_paused.worker = ?) AS dbw_paused, strftime(?, ?, ?) AS dbw_now) AS dbw_anchor LEFT OUTER JOIN (SELECT items_work.source_id AS source_id, items_work.not_before AS not_before
FROM items_work
WHERE items_work.not_before > strftime(?, ?, ?) AND substr(items_work.not_before, ?, ?) = ? ORDER BY items_work.not_before
 LIMIT ? OFFSET ?) AS dbw_waiting ON 1 = 1 ORDER BY dbw_waiting.not_before
