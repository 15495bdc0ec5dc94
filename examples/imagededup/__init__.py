"""Image deduplication on dbworker: an API service and two workers sharing one database.

`app` builds the Coordinator, `workers` holds the handlers, `api` the HTTP service,
`samples` generates images locally and `demo` runs the whole system in one command.
"""
