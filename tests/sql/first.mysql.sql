-- first on mysql (pymysql, capabilities: skip_locked, lock_of)
-- parameters: dbw_sid, param_1='working', dbw_token, dbw_lease, utc_timestamp_1=6, param_2=1, dbw_claimer, utc_timestamp_3=6
INSERT IGNORE INTO items_work (source_id, execution_status, claim_token, lease_expires_at, error, attempts, claimed_by, changed_at) SELECT %(dbw_sid)s AS anon_1, %(param_1)s AS anon_2, %(dbw_token)s AS anon_3, timestampadd(MICROSECOND, %(dbw_lease)s, utc_timestamp(%(utc_timestamp_1)s)) AS timestampadd_1, NULL AS anon_4, %(param_2)s AS anon_5, %(dbw_claimer)s AS anon_6, utc_timestamp(%(utc_timestamp_3)s) AS utc_timestamp_2 FROM DUAL
WHERE NOT (EXISTS (SELECT *
FROM items_work
WHERE items_work.source_id = %(dbw_sid)s))
