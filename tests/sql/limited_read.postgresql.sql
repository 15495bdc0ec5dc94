-- limited_read on postgresql (psycopg, capabilities: skip_locked, lock_of, gen_random_uuid)
-- parameters: coalesce_1='', param_1=0, param_2=1, execution_status_1='finished', execution_status_2='failed', execution_status_3='working', timezone_1='UTC', execution_status_4='unfinished', timezone_2='UTC', dbw_mark, param_3=128, param_4=1, execution_status_5='working', execution_status_6='unfinished', param_5=128, param_6=1, execution_status_7='working', param_7=1, param_8=0, param_9=1, execution_status_8='working', timezone_3='UTC', param_10=1, param_11=0, kind_1=0
WITH dbw_found AS
(SELECT anon_1.id AS id, anon_1.dbw_k0 AS dbw_k0, anon_1.dbw_part AS dbw_part
FROM (SELECT items.id AS id, coalesce(CAST(items.priority AS VARCHAR), %(coalesce_1)s::VARCHAR) AS dbw_k0, %(param_1)s::INTEGER AS dbw_part
FROM items
WHERE NOT (EXISTS (SELECT %(param_2)s::INTEGER AS anon_2
FROM items_work
WHERE items_work.source_id = items.id AND (items_work.execution_status = %(execution_status_1)s::VARCHAR OR items_work.execution_status = %(execution_status_2)s::VARCHAR OR items_work.execution_status = %(execution_status_3)s::VARCHAR AND items_work.lease_expires_at > timezone(%(timezone_1)s::VARCHAR, statement_timestamp()) OR items_work.execution_status = %(execution_status_4)s::VARCHAR AND items_work.not_before > timezone(%(timezone_2)s::VARCHAR, statement_timestamp())))) AND items.id >= %(dbw_mark)s::INTEGER ORDER BY items.id
 LIMIT %(param_3)s::INTEGER) AS anon_1 UNION ALL SELECT anon_3.id AS id, anon_3.dbw_k0 AS dbw_k0, anon_3.dbw_part AS dbw_part
FROM (SELECT items.id AS id, coalesce(CAST(items.priority AS VARCHAR), %(coalesce_1)s::VARCHAR) AS dbw_k0, %(param_4)s::INTEGER AS dbw_part
FROM items
WHERE NOT (EXISTS (SELECT %(param_2)s::INTEGER AS anon_2
FROM items_work
WHERE items_work.source_id = items.id AND (items_work.execution_status = %(execution_status_1)s::VARCHAR OR items_work.execution_status = %(execution_status_2)s::VARCHAR OR items_work.execution_status = %(execution_status_3)s::VARCHAR AND items_work.lease_expires_at > timezone(%(timezone_1)s::VARCHAR, statement_timestamp()) OR items_work.execution_status = %(execution_status_4)s::VARCHAR AND items_work.not_before > timezone(%(timezone_2)s::VARCHAR, statement_timestamp())))) AND items.id < %(dbw_mark)s::INTEGER AND items.id IN (SELECT items_work.source_id
FROM items_work
WHERE (items_work.execution_status = %(execution_status_5)s::VARCHAR OR items_work.execution_status = %(execution_status_6)s::VARCHAR) AND items_work.source_id < %(dbw_mark)s::INTEGER) ORDER BY items.id
 LIMIT %(param_5)s::INTEGER) AS anon_3)
 SELECT dbw_found.id, dbw_found.dbw_k0, dbw_found.dbw_part, dbw_slots0.dbw_slot, dbw_slots0.dbw_holder, dbw_slots0.dbw_token, dbw_slots0.dbw_busy, dbw_slots0.dbw_lapsed
FROM dbw_found LEFT OUTER JOIN (SELECT items_slots.limit_key AS limit_key, array_agg(items_slots.slot) AS dbw_slot, array_agg(items_slots.source_id) AS dbw_holder, array_agg(items_slots.claim_token) AS dbw_token, array_agg(CASE WHEN (EXISTS (SELECT %(param_6)s::INTEGER AS anon_4
FROM items_work
WHERE items_work.source_id = items_slots.source_id AND items_work.claim_token = items_slots.claim_token AND items_work.execution_status = %(execution_status_7)s::VARCHAR)) THEN %(param_7)s::INTEGER ELSE %(param_8)s::INTEGER END) AS dbw_busy, array_agg(CASE WHEN (EXISTS (SELECT %(param_9)s::INTEGER AS anon_5
FROM items_work
WHERE items_work.source_id = items_slots.source_id AND items_work.claim_token = items_slots.claim_token AND items_work.execution_status = %(execution_status_8)s::VARCHAR AND (items_work.lease_expires_at IS NULL OR items_work.lease_expires_at <= timezone(%(timezone_3)s::VARCHAR, statement_timestamp())))) THEN %(param_10)s::INTEGER ELSE %(param_11)s::INTEGER END) AS dbw_lapsed
FROM items_slots
WHERE items_slots.kind = %(kind_1)s::INTEGER AND items_slots.limit_key IN (SELECT dbw_found.dbw_k0
FROM dbw_found) GROUP BY items_slots.limit_key) AS dbw_slots0 ON dbw_slots0.limit_key = dbw_found.dbw_k0 ORDER BY dbw_found.id
