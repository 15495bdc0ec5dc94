-- first_candidate on postgresql (psycopg, capabilities: skip_locked, lock_of, gen_random_uuid)
-- parameters: param_1=1, execution_status_1='finished', execution_status_2='failed', execution_status_3='working', timezone_1='UTC', execution_status_4='unfinished', timezone_2='UTC', dbw_after, param_2=1
SELECT items.id
FROM items
WHERE items.ready AND NOT (EXISTS (SELECT %(param_1)s::INTEGER AS anon_1
FROM items_work
WHERE items_work.source_id = items.id AND (items_work.execution_status = %(execution_status_1)s::VARCHAR OR items_work.execution_status = %(execution_status_2)s::VARCHAR OR items_work.execution_status = %(execution_status_3)s::VARCHAR AND items_work.lease_expires_at > timezone(%(timezone_1)s::VARCHAR, statement_timestamp()) OR items_work.execution_status = %(execution_status_4)s::VARCHAR AND items_work.not_before > timezone(%(timezone_2)s::VARCHAR, statement_timestamp())))) AND items.id >= __[POSTCOMPILE_dbw_after] ORDER BY items.id
 LIMIT %(param_2)s::INTEGER
