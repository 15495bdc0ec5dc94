-- top_key on mariadb (pymysql, capabilities: skip_locked)
-- parameters: none
SELECT max(items.id) AS max_1
FROM items
