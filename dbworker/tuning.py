"""The core's tuning constants, each with its reason, in one place.

None of these is a setting: an application sets leases and polls (``settings``); these are
the intervals, limits and backoffs the core picked, with the figure that chose each. Code
reads them here at the moment it uses them (``tuning.POLL_SECONDS``), so a test may patch
one. Grouped by the part that uses them.
"""

from __future__ import annotations

# --- stopping (coordinator) ------------------------------------------------------------------
# After a stop deadline: time to end handler processes and give their claims back; also how
# long stop() waits for the lease keeper and the tick inserter. The contract bounds stop()
# by its timeout plus "a few seconds".
STOP_MARGIN_SECONDS = 5.0
# At most this long stop() waits for every loop to end a claim under way before it tells
# observers it is draining: a loop stuck in a database call may not answer.
STOP_SEEN_SECONDS = 5.0

# --- wake-ups: payloads (sql.notify, wakeups.outbox) ---------------------------------------
# Rows a claim loop takes by key at once, and so the most a notification names; more named
# between two claims make it sweep from the start instead (so naming more than one past
# this changes nothing). 64 keys fit a NOTIFY payload (8000 bytes) easily.
MAX_NAMED_ROWS = 64
# Ended items' keys per worker in one batch of "done:" announcements; more are announced as
# "done:<worker>" alone (the waiters sweep), which bounds a batch after a burst of ends.
MAX_ANNOUNCED_KEYS = 64

# --- wake-ups: reconnecting (wakeups.connection, wakeups.changes) ------------------------------
# A watcher or reader that lost its connection tries again after 0.2 s, doubling to 10 s
# with jitter: quick after a blip, one attempt in 10 s per pod during an outage. Polling
# covers the gap.
RECONNECT_FIRST_WAIT = 0.2
RECONNECT_MAX_WAIT = 10.0

# --- wake-ups: PostgreSQL listener (wakeups.postgres) ---------------------------------------
# An idle listener sleeps in select() on its socket and a self-pipe (both wake it at once);
# it looks at its stop flag at least this often anyway.
LISTEN_IDLE_CHECK_SECONDS = 5.0

# --- wake-ups: the change table (wakeups.changes; MySQL/MariaDB, SQLite) ------------------------
# A read every 20 ms: pick-up within about 10 ms on average, 20 ms at worst, for one
# indexed read of an empty range (about 0.1 ms of server time) per coordinator.
POLL_SECONDS = 0.02
# Ids are taken at insert and visible at commit: a lower id missing below the highest read
# is looked for this long; a transaction that holds one longer is not waited for.
GAP_SECONDS = 10.0
# Missing ids remembered at most (the newest kept): bounds the read's IN list.
MAX_GAPS = 1024
# Ids below the top missing when a reader starts, looked for as gaps: rows of transactions
# still open when it started.
START_GAPS = 64
# Rows are kept this long for readers, then pruned by any reader (all but the newest): a
# minute is far beyond a read's interval (POLL_SECONDS), so only a stalled reader misses rows.
KEEP_SECONDS = 60.0
# Rows one read hands on at most; more and the loops sweep instead (a wake-up naming no row).
READ_LIMIT = 512

# --- wake-ups: SQLite's commit watcher (wakeups.sqlite) --------------------------------------
# Without file events, while commits come: pick-up within ~20 ms ...
FIRST_INTERVAL = 0.02
# ... and idle: twenty reads a second, about 0.4% of a core here.
MAX_INTERVAL = 0.05
# With file events: the step that makes a commit visible (an index in shared memory) is
# not reported; it comes after the commit's writes (and maybe an fsync), and a WAL restart
# changes the version before the commit does. So after a write the watcher looks again,
# after 1 ms doubling to 20 ms, until nothing changed or was written for 0.2 s; writes
# meanwhile start that over. Looks are 1 ms apart at least; after a wake-up the next look
# waits 2 ms, doubling to 20 ms while every look finds a change (a drain needs no wake-ups:
# its ending items have the loops claim), so a burst costs what polling did.
SETTLE_FIRST = 0.001
SETTLE_MAX = 0.02
SETTLE_QUIET = 0.2
WAKE_GAP_FIRST = 0.002
WAKE_GAP_MAX = 0.02
# A write the kernel did not report (never seen) costs this much.
EVENTS_FALLBACK_SECONDS = 1.0

# --- periodic workers (schedules.policy, schedules.inserter, schedules.ticks) ------------------
# A due time that no coordinator reached within this many seconds of it (all were stopped,
# or the database was down) is missed: ``catch_up`` says how many of those still run.
TICKS_ON_TIME_SECONDS = 1.0
# The server's clock is read again at least this often while no due time is near: a step
# of the server's clock delays a tick by at most this much.
TICKS_MAX_WAIT_SECONDS = 30.0
# Ended ticks past their retention are removed hourly: one indexed delete an hour, and a
# tick outlives its retention by an hour at most.
TICKS_PRUNE_EVERY_SECONDS = 3600.0
# Ticks removed per statement: short transactions, whatever the backlog.
TICKS_PRUNE_BATCH = 1000
# After a database error the inserter tries again after 0.1 s, doubling to 5 s with jitter.
TICKS_ERROR_FIRST_WAIT = 0.1
TICKS_ERROR_MAX_WAIT = 5.0

# =========================================================================================
# The claim engine: loop, sweep, prefetch (dbworker/loop.py, sweep.py, engine/)
# =========================================================================================

# A claim that meets a database error is tried again after this wait, doubling (with 50%
# jitter) to ERROR_MAX_WAIT: a server that is back is used within seconds, one that is down
# costs a connection attempt every few seconds per loop.
ERROR_FIRST_WAIT = 0.1
ERROR_MAX_WAIT = 5.0
# How often a loop reads the soonest waiting items of its worker and whether it is paused
# fleet-wide (at most max_poll_seconds), both in one statement: an item another pod made wait
# is picked up within this much of its time, and a pause stops claims within it.
LOOKUP_SECONDS = 1.0
# A round skipped rows another transaction had locked (another worker's claim on the same
# source, an application's lock): the loop claims again this soon, doubling while they stay so.
LOCKED_ROWS_FIRST_WAIT = 0.02
# ... up to this wait: a lock released without a write (SELECT ... FOR UPDATE, FOR KEY SHARE,
# a rolled-back update) sends no wake-up, so a row held for minutes is still claimed within
# about this much of its release; the cost is one claim round trip a second per loop while
# rows stay locked.
LOCKED_ROWS_MAX_WAIT = 1.0
# Handlers faster than PREFETCH_BELOW_SECONDS on average get items claimed ahead: as many per
# slot as fit in PREFETCH_WINDOW_SECONDS of handler time, at most PREFETCH_MAX_PER_SLOT, so a
# slot that frees up starts its next item without a claim round trip and claims come in
# batches; slower ones get none, so work is not held back from other pods. An item handed
# over behind one that runs longer than PREFETCH_BELOW_SECONDS is taken back.
PREFETCH_BELOW_SECONDS = 0.5
PREFETCH_WINDOW_SECONDS = 0.1
PREFETCH_MAX_PER_SLOT = 16
# An async worker whose items take under ASYNC_CLAIM_BATCH_BELOW_SECONDS on average claims
# once a tenth of its slots are free (at least one), not for each item that finishes, so a
# free slot waits about a tenth of a mean item, at most ~0.2 s (engine/runner.py); longer
# items are claimed one by one as slots free up, as before.
ASYNC_CLAIM_BATCH_DIVISOR = 10
ASYNC_CLAIM_BATCH_BELOW_SECONDS = 2.0
# A sweep from the start (a wrap) walks the finished history once: the next one waits at
# least this many times as long as the last took (a wake-up's: as the cheapest of the last
# three), so wraps cost at most about 1% of the time whatever the history (100,000
# finished items: ~0.1 s on PostgreSQL here).
WRAP_SPACING = 100
# ... but a loop's first wrap is cold (a new connection, the claim's first compile) and can
# take many times a warm one's time under load: a wake-up's wrap waits at most this after it.
COLD_WRAP_SPACING_MAX = 5.0
# With wake-up triggers on the source every write to it names its rows, so a periodic wrap
# only finds rows made claimable by something else (another table its eligible query
# reads, the clock): it waits this many times as long as the last took, and at least
# FED_WRAP_POLLS polls. Idle, a fleet's wraps then cost about 0.01% of a core per loop,
# whatever the history. Wake-ups that name no row still wrap at WRAP_SPACING.
FED_WRAP_SPACING = 10_000
FED_WRAP_POLLS = 6
# A limited worker's claim rounds read from its mark (the lowest key claimable when a round
# last looked, sql/turns.py), and walk from the first row at least this often: rows made
# claimable below the mark with no work record and no wake-up (the clock, another table
# its eligible query reads, a key committed out of order unannounced) wait at most this.
LIMIT_MARK_SECONDS = 2.0
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

# =========================================================================================
# The attempt history (dbworker/sql/history.py, engine/pruner.py)
# =========================================================================================

# Each loop prunes its worker's history this often (with jitter), at most HISTORY_PRUNE_BATCH
# rows per step: old attempts through the ended_at index, then the attempts beyond
# history_attempts of items whose attempts ended since its last pass (plus a margin for
# commits that were slow to land). A fleet of pods does the same work by turns, in small bites.
HISTORY_PRUNE_SECONDS = 60.0
HISTORY_PRUNE_BATCH = 500
HISTORY_PRUNE_MARGIN_SECONDS = 30.0

# Async handler processes (loopwatch): the event loop's beat, how often its worst lag and items
# in flight are reported, and the lag past which the coordinator warns that a coroutine blocks
# the loop. A coroutine not done LOOP_KILL_GRACE_SECONDS after its timeout means its loop does
# not run (its own timeout would have cancelled it): the process is replaced.
LOOP_BEAT_SECONDS = 0.05
LOOP_REPORT_SECONDS = 1.0
LOOP_BLOCKED_SECONDS = 0.5
LOOP_KILL_GRACE_SECONDS = 5.0

# Keys bound in one statement that names many rows (lease renewals, an async handler
# process's batched row reads): a round trip per 500, and far under every server's limit on
# bound parameters (tens of thousands on each).
KEYS_PER_STATEMENT = 500
