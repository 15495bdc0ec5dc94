"""Unit tests of dbworker.pod.health: liveness and readiness rules as pure functions."""

from __future__ import annotations

from dbworker.pod import health

BOUND = 10.0
T0 = 1_000_000.0


def snap(**kw: object) -> health.Snapshot:
    base: dict[str, object] = {"workers": ("hash", "compare"), "started_at": T0}
    base.update(kw)
    return health.Snapshot(**base)  # type: ignore[arg-type]


def test_bound_grows_with_lease_and_poll() -> None:
    assert health.liveness_bound(lease_seconds=30, max_poll_seconds=10) == 40
    assert health.liveness_bound(lease_seconds=2, max_poll_seconds=0.5) == 2.5
    # Long polls dominate short leases: three idle polls must fit.
    assert health.liveness_bound(lease_seconds=1, max_poll_seconds=5) == 20


def test_alive_before_start() -> None:
    v = health.liveness(health.Snapshot(), now=T0 + 1000, bound=BOUND)
    assert v.ok and v.reason == "starting"


def test_alive_with_recent_heartbeats() -> None:
    v = health.liveness(
        snap(heartbeats={"hash": T0 + 95, "compare": T0 + 99}), now=T0 + 100, bound=BOUND
    )
    assert v == health.Verdict(True, "ok")


def test_stale_heartbeat_is_red_and_names_the_worker() -> None:
    v = health.liveness(
        snap(heartbeats={"hash": T0 + 80, "compare": T0 + 99}), now=T0 + 100, bound=BOUND
    )
    assert not v.ok
    assert "'hash'" in v.reason and "20s" in v.reason and "compare" not in v.reason


def test_no_heartbeat_is_fine_within_the_bound_after_start_then_red() -> None:
    assert health.liveness(snap(), now=T0 + 5, bound=BOUND).ok
    v = health.liveness(snap(heartbeats={"hash": T0 + 1}), now=T0 + 11, bound=BOUND)
    assert not v.ok and "'compare'" in v.reason and "since start" in v.reason


def test_ended_loop_is_red_with_reason() -> None:
    v = health.liveness(
        snap(heartbeats={"hash": T0 + 99, "compare": T0 + 99}, ended=frozenset({"compare"})),
        now=T0 + 100,
        bound=BOUND,
    )
    assert not v.ok and v.reason == "loop of worker 'compare' ended"


def test_draining_stays_alive_even_with_ended_loops() -> None:
    v = health.liveness(
        snap(draining=True, ended=frozenset({"hash", "compare"})), now=T0 + 1000, bound=BOUND
    )
    assert v == health.Verdict(True, "draining")


def test_heartbeat_coming_back_turns_green_again() -> None:
    stale = snap(heartbeats={"hash": T0, "compare": T0})
    assert not health.liveness(stale, now=T0 + 50, bound=BOUND).ok
    fresh = snap(heartbeats={"hash": T0 + 49, "compare": T0 + 49})
    assert health.liveness(fresh, now=T0 + 50, bound=BOUND).ok


def test_readiness_rules() -> None:
    assert health.readiness(health.Snapshot()) == health.Verdict(False, "not started")
    waiting = health.readiness(snap(heartbeats={"hash": T0}))
    assert not waiting.ok and "compare" in waiting.reason and "hash" not in waiting.reason
    assert health.readiness(snap(heartbeats={"hash": T0, "compare": T0})) == health.Verdict(
        True, "ok"
    )
    draining = snap(heartbeats={"hash": T0, "compare": T0}, draining=True)
    assert health.readiness(draining) == health.Verdict(False, "draining")
    ended = snap(heartbeats={"hash": T0, "compare": T0}, ended=frozenset({"hash"}))
    assert health.readiness(ended) == health.Verdict(False, "loop ended: hash")


def test_tracker_records_events_into_snapshots() -> None:
    t = health.HealthTracker()
    assert t.snapshot().started_at is None
    t.started(["hash"], at=T0)
    t.heartbeat("hash", timestamp=T0 + 1)
    first = t.snapshot()
    t.heartbeat("hash", timestamp=T0 + 2)
    t.draining(draining=True)
    t.loop_ended("hash")
    # Snapshots are frozen copies.
    assert first.heartbeats == {"hash": T0 + 1} and not first.draining
    second = t.snapshot()
    assert second.heartbeats == {"hash": T0 + 2} and second.draining and second.ended == {"hash"}
    assert second.workers == ("hash",) and second.started_at == T0


def test_tracker_takes_workers_from_coordinator_started_if_not_told() -> None:
    t = health.HealthTracker()
    t.coordinator_started(dialect="sqlite", slots={"a": 1, "b": 2})
    s = t.snapshot()
    assert s.workers == ("a", "b") and s.started_at is not None


def test_a_dead_thread_is_red_whatever_the_heartbeats_say() -> None:
    fresh = {"hash": T0 + 99, "compare": T0 + 99}
    v = health.liveness(snap(heartbeats=fresh, dead_threads=("lease keeper",)), now=T0 + 100, bound=BOUND)
    assert v == health.Verdict(False, "lease keeper is no longer running")
    r = health.readiness(snap(heartbeats=fresh, dead_threads=("lease keeper", "loop of worker 'hash'")))
    assert r == health.Verdict(False, "not running: lease keeper, loop of worker 'hash'")
    # Draining: threads end on purpose.
    assert health.liveness(snap(draining=True, dead_threads=("lease keeper",)), now=T0, bound=BOUND).ok


def test_tracker_asks_for_dead_threads_at_every_snapshot() -> None:
    dead: list[str] = []
    tracker = health.HealthTracker(lambda: dead)
    assert tracker.snapshot().dead_threads == ()
    dead.append("lease keeper")
    assert tracker.snapshot().dead_threads == ("lease keeper",)
