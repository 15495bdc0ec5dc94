"""Periodic work: a schedule's due times (``policy``), the ticks table whose rows are the
work (``ticks``) and the thread that inserts one tick per due time (``inserter``).
"""
