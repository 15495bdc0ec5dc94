"""The claim-path SQL as each server receives it: one committed file per statement and dialect.

``samples`` says what is compiled and how; ``tests/unit/test_sql_files.py`` fails when a
file differs from what the code compiles; ``python -m tests.sql.write`` rewrites them.
"""
