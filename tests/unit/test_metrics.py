"""Unit tests of dbworker.pod.metrics: events become samples on a private registry."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from dbworker import observe
from dbworker.pod import metrics


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def m(registry: CollectorRegistry) -> metrics.WorkerMetrics:
    wm = metrics.WorkerMetrics(registry, version="1.2.3")
    wm.coordinator_started(dialect="postgresql", slots={"hash": 3, "compare": 1})
    return wm


def value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


def test_every_known_series_exists_at_zero_after_start(
    registry: CollectorRegistry, m: metrics.WorkerMetrics
) -> None:
    for worker in ("hash", "compare"):
        assert value(registry, "dbworker_claims_total", worker=worker) == 0
        assert value(registry, "dbworker_leases_taken_over_total", worker=worker) == 0
        assert value(registry, "dbworker_handlers_active", worker=worker) == 0
        assert value(registry, "dbworker_backlog", worker=worker) == 0
        assert value(registry, "dbworker_loop_heartbeat_timestamp_seconds", worker=worker) == 0
        assert value(registry, "dbworker_claim_duration_seconds_count", worker=worker) == 0
        for outcome in observe.OUTCOMES:
            assert value(registry, "dbworker_executions_total", worker=worker, outcome=outcome) == 0
            assert (
                value(
                    registry,
                    "dbworker_handler_duration_seconds_count",
                    worker=worker,
                    outcome=outcome,
                )
                == 0
            )
        for result in observe.RENEWAL_RESULTS:
            assert (
                value(registry, "dbworker_lease_renewals_total", worker=worker, result=result) == 0
            )
        for operation in observe.OPERATIONS:
            assert (
                value(registry, "dbworker_db_errors_total", worker=worker, operation=operation) == 0
            )
    assert value(registry, "dbworker_handler_slots", worker="hash") == 3
    assert value(registry, "dbworker_handler_slots", worker="compare") == 1
    assert value(registry, "dbworker_draining") == 0
    assert value(registry, "dbworker_build_info", version="1.2.3", dialect="postgresql") == 1


def test_claims_count_items_and_takeovers_and_time_every_round_trip(
    registry: CollectorRegistry, m: metrics.WorkerMetrics
) -> None:
    m.claimed("hash", count=2, taken_over=1, seconds=0.003)
    m.claimed("hash", count=0, taken_over=0, seconds=0.002)
    assert value(registry, "dbworker_claims_total", worker="hash") == 2
    assert value(registry, "dbworker_leases_taken_over_total", worker="hash") == 1
    assert value(registry, "dbworker_claim_duration_seconds_count", worker="hash") == 2
    assert (
        value(registry, "dbworker_claim_duration_seconds_bucket", worker="hash", le="0.0025") == 1
    )
    assert value(registry, "dbworker_claims_total", worker="compare") == 0


def test_executions_count_by_outcome_and_observe_duration_when_known(
    registry: CollectorRegistry, m: metrics.WorkerMetrics
) -> None:
    m.executed("hash", outcome="finished", seconds=0.2)
    m.executed("hash", outcome="finished", seconds=1800.0)
    m.executed("hash", outcome="crashed", seconds=None)
    assert value(registry, "dbworker_executions_total", worker="hash", outcome="finished") == 2
    assert value(registry, "dbworker_executions_total", worker="hash", outcome="crashed") == 1
    assert (
        value(
            registry, "dbworker_handler_duration_seconds_count", worker="hash", outcome="finished"
        )
        == 2
    )
    assert value(
        registry, "dbworker_handler_duration_seconds_sum", worker="hash", outcome="finished"
    ) == pytest.approx(1800.2)
    # Half-hour handlers land in a real bucket, not only +Inf.
    assert (
        value(
            registry,
            "dbworker_handler_duration_seconds_bucket",
            worker="hash",
            outcome="finished",
            le="1800.0",
        )
        == 2
    )
    assert (
        value(
            registry,
            "dbworker_handler_duration_seconds_bucket",
            worker="hash",
            outcome="finished",
            le="0.25",
        )
        == 1
    )
    assert (
        value(registry, "dbworker_handler_duration_seconds_count", worker="hash", outcome="crashed")
        == 0
    )


def test_buckets_span_milliseconds_to_an_hour() -> None:
    assert metrics.HANDLER_BUCKETS[0] <= 0.005
    assert metrics.HANDLER_BUCKETS[-1] == 3600.0
    assert list(metrics.HANDLER_BUCKETS) == sorted(metrics.HANDLER_BUCKETS)


def test_gauges_follow_active_heartbeat_and_draining(
    registry: CollectorRegistry, m: metrics.WorkerMetrics
) -> None:
    m.active("hash", running=3)
    m.active("hash", running=2)
    m.heartbeat("hash", timestamp=1_700_000_000.5)
    m.draining(draining=True)
    assert value(registry, "dbworker_handlers_active", worker="hash") == 2
    assert (
        value(registry, "dbworker_loop_heartbeat_timestamp_seconds", worker="hash")
        == 1_700_000_000.5
    )
    assert value(registry, "dbworker_draining") == 1
    m.draining(draining=False)
    assert value(registry, "dbworker_draining") == 0


def test_renewals_and_db_errors_count(
    registry: CollectorRegistry, m: metrics.WorkerMetrics
) -> None:
    m.renewed("hash", result="renewed", count=3)
    m.renewed("hash", result="lost", count=1)
    m.renewed("hash", result="error", count=0)
    m.db_error("compare", operation="complete", error=RuntimeError("x"))
    assert value(registry, "dbworker_lease_renewals_total", worker="hash", result="renewed") == 3
    assert value(registry, "dbworker_lease_renewals_total", worker="hash", result="lost") == 1
    assert value(registry, "dbworker_lease_renewals_total", worker="hash", result="error") == 0
    assert value(registry, "dbworker_db_errors_total", worker="compare", operation="complete") == 1


def test_build_info_has_one_series(registry: CollectorRegistry, m: metrics.WorkerMetrics) -> None:
    m.touch(["hash"], dialect="sqlite")
    text = generate_latest(registry).decode()
    assert text.count("dbworker_build_info{") == 1
    assert value(registry, "dbworker_build_info", version="1.2.3", dialect="sqlite") == 1


def test_touch_twice_keeps_values(registry: CollectorRegistry, m: metrics.WorkerMetrics) -> None:
    m.claimed("hash", count=1, taken_over=0, seconds=0.001)
    m.touch(["hash", "compare"])
    assert value(registry, "dbworker_claims_total", worker="hash") == 1


def test_observer_fan_out_reaches_metrics(
    registry: CollectorRegistry, m: metrics.WorkerMetrics
) -> None:
    fan = observe.Observers([m])
    fan.executed("hash", outcome="failed", seconds=0.01)
    assert value(registry, "dbworker_executions_total", worker="hash", outcome="failed") == 1


def test_nothing_lands_on_the_global_registry() -> None:
    from prometheus_client import REGISTRY

    metrics.WorkerMetrics(CollectorRegistry(), version="x").touch(["solo"], dialect="sqlite")
    assert REGISTRY.get_sample_value("dbworker_claims_total", {"worker": "solo"}) is None


class FakeBacklog:
    def __init__(self, values: dict[str, int | Exception]) -> None:
        self.values = values
        self.calls: list[tuple[str, int]] = []

    def __call__(self, worker: str, *, cap: int) -> int:
        self.calls.append((worker, cap))
        v = self.values[worker]
        if isinstance(v, Exception):
            raise v
        return v


def test_backlog_sampler_sets_gauge_and_counts_errors(
    registry: CollectorRegistry, m: metrics.WorkerMetrics
) -> None:
    fake = FakeBacklog({"hash": 7, "compare": RuntimeError("postgresql://u:hunter2@db/x down")})
    sampler = metrics.BacklogSampler(fake, m, ["hash", "compare"], interval=15, cap=50)
    sampler.sample_once()
    assert fake.calls == [("hash", 50), ("compare", 50)]
    assert value(registry, "dbworker_backlog", worker="hash") == 7
    assert value(registry, "dbworker_db_errors_total", worker="compare", operation="backlog") == 1
    fake.values["hash"] = RuntimeError("gone")
    sampler.sample_once()
    # The last good value stays: an outage is visible in db_errors, not as an empty queue.
    assert value(registry, "dbworker_backlog", worker="hash") == 7


def test_backlog_sampler_thread_samples_and_stops(
    registry: CollectorRegistry, m: metrics.WorkerMetrics
) -> None:
    from tests.helpers import wait_until

    fake = FakeBacklog({"hash": 4})
    sampler = metrics.BacklogSampler(fake, m, ["hash"], interval=0.01)
    sampler.start()
    try:
        wait_until(lambda: len(fake.calls) >= 3, timeout=10, what="three backlog samples")
    finally:
        sampler.stop()
    assert value(registry, "dbworker_backlog", worker="hash") == 4


def test_backlog_sampler_with_zero_interval_never_runs(
    registry: CollectorRegistry, m: metrics.WorkerMetrics
) -> None:
    fake = FakeBacklog({"hash": 4})
    sampler = metrics.BacklogSampler(fake, m, ["hash"], interval=0)
    sampler.start()
    sampler.stop()
    assert fake.calls == []


def test_async_processes_report_loop_lag_and_items_in_flight(
    registry: CollectorRegistry, m: metrics.WorkerMetrics
) -> None:
    observers = observe.Observers([m])  # as the coordinator fans the pool's health reports out
    observers.loop_health("hash", process=0, lag_seconds=0.003, in_flight=180)
    observers.loop_health("hash", process=1, lag_seconds=2.5, in_flight=3)
    assert value(registry, "dbworker_event_loop_lag_seconds", worker="hash", process="0") == 0.003
    assert value(registry, "dbworker_items_in_flight", worker="hash", process="0") == 180
    assert value(registry, "dbworker_event_loop_lag_seconds", worker="hash", process="1") == 2.5
    observers.loop_health("hash", process=1, lag_seconds=0.0, in_flight=0)  # the latest report wins
    assert value(registry, "dbworker_items_in_flight", worker="hash", process="1") == 0
