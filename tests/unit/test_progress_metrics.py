"""The progress gauges: sampled with the backlog, per worker, errors counted (issue 30)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from dbworker.pod import metrics


def test_progress_gauges_are_sampled_with_the_backlog() -> None:
    registry = CollectorRegistry()
    m = metrics.WorkerMetrics(registry, version="1.2.3")
    m.coordinator_started(dialect="postgresql", slots={"hash": 1, "compare": 1})
    assert registry.get_sample_value("dbworker_progress_items", {"worker": "hash"}) == 0
    answers: dict[str, tuple[int, float | None] | Exception] = {"hash": (3, 0.25), "compare": (0, None)}

    def progress(worker: str) -> tuple[int, float | None]:
        answer = answers[worker]
        if isinstance(answer, Exception):
            raise answer
        return answer

    sampler = metrics.BacklogSampler(lambda worker, cap: 0, m, ["hash", "compare"], interval=15, progress=progress)
    sampler.sample_once()
    assert registry.get_sample_value("dbworker_progress_items", {"worker": "hash"}) == 3
    assert registry.get_sample_value("dbworker_progress_mean_fraction", {"worker": "hash"}) == 0.25
    assert registry.get_sample_value("dbworker_progress_mean_fraction", {"worker": "compare"}) == 0
    answers["hash"] = RuntimeError("down")
    sampler.sample_once()
    assert registry.get_sample_value("dbworker_progress_items", {"worker": "hash"}) == 3  # the last value stays
    assert registry.get_sample_value("dbworker_db_errors_total", {"worker": "hash", "operation": "backlog"}) == 1


def test_the_limit_waiting_gauge_is_sampled_with_the_backlog_for_workers_with_limits() -> None:
    registry = CollectorRegistry()
    m = metrics.WorkerMetrics(registry, version="1.2.3")
    m.coordinator_started(dialect="mariadb", slots={"export": 1, "plain": 1})
    assert registry.get_sample_value("dbworker_limit_waiting_items", {"worker": "export"}) == 0
    answers: dict[str, int | Exception | None] = {"export": 12, "plain": None}
    calls: list[tuple[str, int]] = []

    def waiting(worker: str, cap: int) -> int | None:
        calls.append((worker, cap))
        answer = answers[worker]
        if isinstance(answer, Exception):
            raise answer
        return answer

    sampler = metrics.BacklogSampler(lambda worker, cap: 0, m, ["export", "plain"], interval=15, cap=40, waiting=waiting)
    sampler.sample_once()
    assert calls == [("export", 40), ("plain", 40)]
    assert registry.get_sample_value("dbworker_limit_waiting_items", {"worker": "export"}) == 12
    assert registry.get_sample_value("dbworker_limit_waiting_items", {"worker": "plain"}) == 0
    answers["export"] = RuntimeError("down")
    sampler.sample_once()
    assert registry.get_sample_value("dbworker_limit_waiting_items", {"worker": "export"}) == 12  # the last value stays
    assert registry.get_sample_value("dbworker_db_errors_total", {"worker": "export", "operation": "backlog"}) == 1
    # By worker only: no series names a key.
    labels = {tuple(s.labels) for f in registry.collect() if f.name == "dbworker_limit_waiting_items" for s in f.samples}
    assert labels == {("worker",)}
