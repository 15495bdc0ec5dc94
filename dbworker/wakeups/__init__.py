"""What wakes a claim loop before its next poll: notifications, commits, ended dependencies, due times.

Polling stays the floor everywhere; each source here only shortens the wait. ``services``
picks the sources a database offers and starts and stops them as a list; the router
decides which loop a wake-up reaches; the watchers hold connections of their own.
"""
