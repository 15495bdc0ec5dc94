-- load_source on mariadb (pymysql, capabilities: skip_locked)
-- parameters: dbw_key
SELECT items.id, items.ready, items.priority
FROM items
WHERE items.id = %(dbw_key)s
