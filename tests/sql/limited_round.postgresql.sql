-- limited_round on postgresql (psycopg, capabilities: skip_locked, lock_of, gen_random_uuid)
-- parameters: dbw_to_top, dbw_mark, dbw_walked, timezone_1='UTC', kind_1=-1, limit_key_1='', slot_1=0, dbw_set_mark, param_1='working', timezone_2='UTC', make_interval_1=0, make_interval_2=0, make_interval_3=0, make_interval_4=0, make_interval_5=0, make_interval_6=0, dbw_lease, param_2=1, dbw_claimer, timezone_4='UTC', dbw_sids, dbw_claims, timezone_6='UTC', dbw_kinds, dbw_keys, dbw_slots, dbw_fresh, dbw_previous, dbw_backs, dbw_holders, dbw_tokens, timezone_7='UTC', timezone_8='UTC', make_interval_7=0, make_interval_8=0, make_interval_9=0, make_interval_10=0, make_interval_11=0, make_interval_12=0, param_3=1, execution_status_1='working', dbw_need, param_4='working', param_5=None, attempts_1=1, param_6=None, execution_status_2='unfinished', timezone_9='UTC', execution_status_3='working', timezone_10='UTC'
WITH dbw_mark AS
(UPDATE items_slots SET source_id=CASE WHEN CAST(%(dbw_to_top)s AS BOOLEAN) THEN (SELECT max(items.id) AS max_1
FROM items) ELSE %(dbw_mark)s::INTEGER END, taken_at=CASE WHEN CAST(%(dbw_walked)s AS BOOLEAN) THEN timezone(%(timezone_1)s::VARCHAR, statement_timestamp()) ELSE items_slots.taken_at END WHERE items_slots.kind = %(kind_1)s::INTEGER AND items_slots.limit_key = %(limit_key_1)s::VARCHAR AND items_slots.slot = %(slot_1)s::INTEGER AND CAST(%(dbw_set_mark)s AS BOOLEAN) RETURNING items_slots.slot),
dbw_slot_writes AS
(SELECT unnest(CAST(%(dbw_kinds)s AS INTEGER[])) AS kind, unnest(CAST(%(dbw_keys)s AS VARCHAR(191)[])) AS limit_key, unnest(CAST(%(dbw_slots)s AS INTEGER[])) AS slot, unnest(CAST(%(dbw_fresh)s AS BOOLEAN[])) AS fresh, unnest(CAST(%(dbw_previous)s AS VARCHAR(36)[])) AS previous, unnest(CAST(%(dbw_backs)s AS FLOAT[])) AS back, unnest(CAST(%(dbw_holders)s AS INTEGER[])) AS holder, unnest(CAST(%(dbw_tokens)s AS VARCHAR(36)[])) AS token),
dbw_inserted AS
(INSERT INTO items_slots (kind, limit_key, slot, source_id, claim_token, taken_at) SELECT dbw_slot_writes.kind AS kind, dbw_slot_writes.limit_key AS limit_key, dbw_slot_writes.slot AS slot, dbw_slot_writes.holder AS holder, dbw_slot_writes.token AS token, timezone(%(timezone_6)s::VARCHAR, statement_timestamp()) AS timezone_5
FROM dbw_slot_writes
WHERE dbw_slot_writes.fresh ON CONFLICT DO NOTHING RETURNING items_slots.claim_token),
dbw_updated AS
(UPDATE items_slots SET source_id=dbw_slot_writes.holder, claim_token=dbw_slot_writes.token, taken_at=timezone(%(timezone_7)s::VARCHAR, statement_timestamp()) FROM dbw_slot_writes WHERE items_slots.kind = dbw_slot_writes.kind AND items_slots.limit_key = dbw_slot_writes.limit_key AND items_slots.slot = dbw_slot_writes.slot AND NOT dbw_slot_writes.fresh AND items_slots.claim_token IS NOT DISTINCT FROM dbw_slot_writes.previous AND (dbw_slot_writes.back IS NOT NULL AND items_slots.taken_at <= timezone(%(timezone_8)s::VARCHAR, statement_timestamp()) + make_interval(%(make_interval_7)s::INTEGER, %(make_interval_8)s::INTEGER, %(make_interval_9)s::INTEGER, %(make_interval_10)s::INTEGER, %(make_interval_11)s::INTEGER, %(make_interval_12)s::INTEGER, dbw_slot_writes.back) OR dbw_slot_writes.back IS NULL AND NOT (EXISTS (SELECT %(param_3)s::INTEGER AS anon_8
FROM items_work
WHERE items_work.source_id = items_slots.source_id AND items_work.claim_token = items_slots.claim_token AND items_work.execution_status = %(execution_status_1)s::VARCHAR))) RETURNING items_slots.claim_token),
dbw_candidates AS
(SELECT anon_6.sid AS sid, anon_6.token AS token, (SELECT items_work.execution_status
FROM items_work
WHERE items_work.source_id = anon_6.sid) AS dbw_previous
FROM (SELECT unnest(CAST(%(dbw_sids)s AS INTEGER[])) AS sid, unnest(CAST(%(dbw_claims)s AS VARCHAR(36)[])) AS token) AS anon_6
WHERE anon_6.token IN (SELECT anon_7.claim_token
FROM (SELECT dbw_inserted.claim_token AS claim_token
FROM dbw_inserted UNION ALL SELECT dbw_updated.claim_token AS claim_token
FROM dbw_updated) AS anon_7 GROUP BY anon_7.claim_token
HAVING count(*) = CAST(%(dbw_need)s AS INTEGER))),
dbw_taken AS
(INSERT INTO items_work (source_id, execution_status, claim_token, lease_expires_at, error, attempts, claimed_by, changed_at) SELECT dbw_candidates.sid AS sid, %(param_1)s::VARCHAR AS anon_1, dbw_candidates.token AS token, timezone(%(timezone_2)s::VARCHAR, statement_timestamp()) + make_interval(%(make_interval_1)s::INTEGER, %(make_interval_2)s::INTEGER, %(make_interval_3)s::INTEGER, %(make_interval_4)s::INTEGER, %(make_interval_5)s::INTEGER, %(make_interval_6)s::INTEGER, %(dbw_lease)s) AS anon_2, NULL AS anon_3, %(param_2)s::INTEGER AS anon_4, %(dbw_claimer)s::VARCHAR AS anon_5, timezone(%(timezone_4)s::VARCHAR, statement_timestamp()) AS timezone_3
FROM dbw_candidates ON CONFLICT (source_id) DO UPDATE SET execution_status = %(param_4)s::VARCHAR, claim_token = excluded.claim_token, lease_expires_at = excluded.lease_expires_at, error = %(param_5)s::VARCHAR, attempts = (items_work.attempts + %(attempts_1)s::INTEGER), not_before = %(param_6)s::TIMESTAMP WITHOUT TIME ZONE, claimed_by = excluded.claimed_by, changed_at = excluded.changed_at WHERE items_work.execution_status = %(execution_status_2)s::VARCHAR AND (items_work.not_before IS NULL OR items_work.not_before <= timezone(%(timezone_9)s::VARCHAR, statement_timestamp())) OR items_work.execution_status = %(execution_status_3)s::VARCHAR AND (items_work.lease_expires_at IS NULL OR items_work.lease_expires_at <= timezone(%(timezone_10)s::VARCHAR, statement_timestamp())) RETURNING items_work.source_id, items_work.claim_token)
 SELECT dbw_taken.source_id, dbw_taken.claim_token, dbw_candidates.dbw_previous
FROM dbw_taken JOIN dbw_candidates ON dbw_taken.source_id = dbw_candidates.sid
