-- relax on postgresql (psycopg, capabilities: skip_locked, lock_of, gen_random_uuid)
-- parameters: set_config_2='synchronous_commit', set_config_3='off'
SELECT set_config(%(set_config_2)s::VARCHAR, %(set_config_3)s::VARCHAR, true) AS set_config_1
