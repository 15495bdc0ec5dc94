"""Every statement dbworker runs: tables, upgrades, dialect differences, claims, status, NOTIFY.

Nothing here starts a thread or a process; the loop, the lease keeper and the handler
processes call these functions with a connection of their own.
"""
