-- load_source on sqlite (pysqlite, capabilities: none)
-- parameters: dbw_key
SELECT items.id, items.ready, items.priority
FROM items
WHERE items.id = ?
