-- top_key on mysql (pymysql, capabilities: skip_locked, lock_of)
-- parameters: none
SELECT max(items.id) AS max_1
FROM items
