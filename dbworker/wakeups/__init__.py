"""What wakes a claim loop before its next poll: notifications, commits, ended dependencies.

Polling stays the floor everywhere; each source here only shortens the wait. The router
decides which loop a wake-up reaches; the watchers hold connections of their own.
"""
