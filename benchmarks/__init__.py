"""Side-by-side benchmark of dbworker against Celery+Redis, procrastinate and PgQueuer.

`python -m benchmarks.run` is the one entry point; see benchmarks/README.md.
"""
