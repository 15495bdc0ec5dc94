-- blocked_after on postgresql (psycopg, capabilities: skip_locked, lock_of, gen_random_uuid)
-- parameters: param_1=1, dbw_after, execution_status_1='finished', execution_status_2='failed', execution_status_3='working', timezone_1='UTC', execution_status_4='unfinished', timezone_2='UTC'
EXISTS (SELECT %(param_1)s::INTEGER AS anon_1
FROM items_work, items
WHERE items_work.source_id = items.id AND items_work.source_id > %(dbw_after)s::INTEGER AND (items_work.execution_status = %(execution_status_1)s::VARCHAR OR items_work.execution_status = %(execution_status_2)s::VARCHAR OR items_work.execution_status = %(execution_status_3)s::VARCHAR AND items_work.lease_expires_at > timezone(%(timezone_1)s::VARCHAR, statement_timestamp()) OR items_work.execution_status = %(execution_status_4)s::VARCHAR AND items_work.not_before > timezone(%(timezone_2)s::VARCHAR, statement_timestamp())))
