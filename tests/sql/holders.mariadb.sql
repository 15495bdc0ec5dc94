-- holders on mariadb (pymysql, capabilities: skip_locked)
-- parameters: dbw_sids
SELECT items_work.source_id, items_work.claim_token
FROM items_work
WHERE items_work.source_id IN (__[POSTCOMPILE_dbw_sids])
