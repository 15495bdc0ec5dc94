-- lookup on mysql (pymysql, capabilities: skip_locked, lock_of)
-- parameters: worker_1='items', utc_timestamp_1=6, param_1=-60000000, utc_timestamp_2=6, param_2=64
SELECT dbw_anchor.dbw_paused, dbw_anchor.dbw_now, dbw_waiting.source_id, dbw_waiting.not_before
FROM (SELECT EXISTS (SELECT *
FROM dbworker_paused
WHERE dbworker_paused.worker = %(worker_1)s) AS dbw_paused, utc_timestamp(%(utc_timestamp_1)s) AS dbw_now) AS dbw_anchor LEFT OUTER JOIN (SELECT items_work.source_id AS source_id, items_work.not_before AS not_before
FROM items_work
WHERE items_work.not_before > timestampadd(MICROSECOND, %(param_1)s, utc_timestamp(%(utc_timestamp_2)s)) ORDER BY items_work.not_before
 LIMIT %(param_2)s) AS dbw_waiting ON true = 1 ORDER BY dbw_waiting.not_before
