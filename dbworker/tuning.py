"""Every tuning constant of the core, each with its reason: numbers a maintainer may change,
none a user sets (those are ``settings``'). Plain data; imports nothing.
"""

from __future__ import annotations

# =========================================================================================
# The claim engine: loop, sweep, prefetch (dbworker/loop.py, sweep.py, engine/)
# =========================================================================================

# A claim that meets a database error is tried again after this wait, doubling (with 50%
# jitter) to ERROR_MAX_WAIT: a server that is back is used within seconds, one that is down
# costs a connection attempt every few seconds per loop.
ERROR_FIRST_WAIT = 0.1
ERROR_MAX_WAIT = 5.0
# How often a loop reads the soonest waiting items of its worker and whether it is paused
# fleet-wide (at most max_poll_seconds), both on one connection: an item another pod made wait
# is picked up within this much of its time, and a pause stops claims within it.
LOOKUP_SECONDS = 1.0
# A round skipped rows another transaction had locked (another worker's claim on the same
# source, an application's lock): the loop claims again this soon, doubling while they stay so.
LOCKED_ROWS_FIRST_WAIT = 0.02
# Handlers faster than PREFETCH_BELOW_SECONDS on average get items claimed ahead: as many per
# slot as fit in PREFETCH_WINDOW_SECONDS of handler time, at most PREFETCH_MAX_PER_SLOT, so a
# slot that frees up starts its next item without a claim round trip and claims come in
# batches; slower ones get none, so work is not held back from other pods. An item handed
# over behind one that runs longer than PREFETCH_BELOW_SECONDS is taken back.
PREFETCH_BELOW_SECONDS = 0.5
PREFETCH_WINDOW_SECONDS = 0.1
PREFETCH_MAX_PER_SLOT = 16
# A sweep from the start (a wrap) walks the finished history once: the next one waits at
# least this many times as long as the last took, so wraps cost at most about 1% of the
# time whatever the history (100,000 finished items: ~0.1 s on PostgreSQL here).
WRAP_SPACING = 100
# With wake-up triggers on the source every write to it names its rows, so a periodic wrap
# only finds rows made claimable by something else (another table its eligible query
# reads, the clock): it waits this many times as long as the last took, and at least
# FED_WRAP_POLLS polls. Idle, a fleet's wraps then cost about 0.01% of a core per loop,
# whatever the history. Wake-ups that name no row still wrap at WRAP_SPACING.
FED_WRAP_SPACING = 10_000
FED_WRAP_POLLS = 6
# Keys of items a loop saw end recently: a notification for one of them is most likely
# its handler's own write to its row, which needs no claim.
RECENT_ENDED = 1024
# A handler process that keeps dying before it is ready is respawned after this wait,
# doubling to RESPAWN_MAX_WAIT: a broken application cannot spin the CPU.
RESPAWN_FIRST_WAIT = 0.5
RESPAWN_MAX_WAIT = 30.0
# A failed lease renewal is tried again after this wait, doubling (with jitter) to a third
# of the lease: the next regular renewal.
RENEW_ERROR_FIRST_WAIT = 0.2
# How often a handler process checks that its coordinator is alive: an orphan exits within
# this much (its claim is then taken over elsewhere once the lease expires).
PARENT_CHECK_SECONDS = 0.5
