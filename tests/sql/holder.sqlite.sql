-- holder on sqlite (pysqlite, capabilities: none)
-- parameters: source_id_1=1
SELECT items_work.claim_token
FROM items_work
WHERE items_work.source_id = ?
