-- load_source on mysql (pymysql, capabilities: skip_locked, lock_of)
-- parameters: dbw_key
SELECT items.id, items.ready, items.priority
FROM items
WHERE items.id = %(dbw_key)s
