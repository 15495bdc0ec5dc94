-- top_key on sqlite (pysqlite, capabilities: none)
-- parameters: none
SELECT max(items.id) AS max_1
FROM items
