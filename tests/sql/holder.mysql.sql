-- holder on mysql (pymysql, capabilities: skip_locked, lock_of)
-- parameters: source_id_1=1
SELECT items_work.claim_token
FROM items_work
WHERE items_work.source_id = %(source_id_1)s
