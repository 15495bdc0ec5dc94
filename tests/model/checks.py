"""The checks of the model test: the handlers' runs (from the runs log), the work tables and the
committed effects held against the model.

(a) pick-up: every claimable mark is answered by a run, and no row waits more than ``BOUND``
    seconds while its worker idles, nor more than ``BOUND`` seconds in all while rows with
    higher keys that became claimable later run first (passed over). On this 2-core machine
    shared by many processes a handler's claim and commit can take a second, so a row queued
    behind others may wait long: that is capacity, not a missing wake-up, and is not counted.
    Marks pending when a coordinator was SIGKILLed may wait for its leases to expire, those
    pending at a SIGTERM for its drain;
(b) no (worker, job) has two runs at once;
(c) every (worker, job) ends as the model says (FINISHED, FAILED, cancelled, never claimed), and
    no run starts before its ``Unfinished(after=)`` delay;
(d) every step the model expects is committed exactly once, none twice, none after a cancel.
"""

from __future__ import annotations

import bisect
import itertools
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from tests.apps.model_app import WORKERS
from tests.model.fleet import Ending
from tests.model.model import Key, Mark, Model

BOUND = 5.0  # seconds a claimable row may wait while its worker idles, or while younger rows run
GRACE = 1.0  # a worker counts as busy this long after one of its handlers started or ended
OVERTAKE_SLACK = 1.0  # a row claimable this much later, with a higher key, started this much sooner: passed over
EARLY_TOL = 1.0  # a run may start this much before its Unfinished delay (clock rounding)


@dataclass
class Run:
    key: Key
    pid: int
    start: float
    end: float | None = None  # the handler's end, or the death of its process when it was killed
    out: str | None = None
    ended_by_death: bool = False


@dataclass
class Pickup:
    mark: Mark
    run: Run | None
    at: float  # the mark's time, moved past a coordinator ending that may have held the claim
    lag: float | None = None  # time waited while its worker idled (None: never ran)
    raw: float | None = None  # time waited


class Idle:
    """When a worker ran nothing: no handler of it running in any coordinator, none started or
    ended within ``GRACE`` before. A row that waits while its worker works on others waits for
    capacity (on a loaded machine a handler's claim and commit take long), not for a wake-up; a
    row that waits while its worker idles was left behind. Only idle time counts as lag."""

    def __init__(self, worker: str, runs: dict[Key, list[Run]], lease: float) -> None:
        spans = sorted((r.start, (r.end if r.end is not None else r.start + lease / 3 + 1) + GRACE)
                       for key, rs in runs.items() if key[0] == worker for r in rs)  # fmt: skip
        merged: list[list[float]] = []
        for start, end in spans:
            if merged and start <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], end)
            else:
                merged.append([start, end])
        self.starts = [m[0] for m in merged]
        self.ends = [m[1] for m in merged]
        self.busy_before = [0.0]  # busy time in the spans before span i
        for start, end in merged:
            self.busy_before.append(self.busy_before[-1] + end - start)

    def _busy_until(self, t: float) -> float:
        i = bisect.bisect_right(self.starts, t)  # spans starting at or before t
        if i == 0:
            return 0.0
        return self.busy_before[i - 1] + min(t, self.ends[i - 1]) - self.starts[i - 1]

    def between(self, a: float, b: float) -> float:
        return max(0.0, (b - a) - (self._busy_until(b) - self._busy_until(a)))


@dataclass
class Findings:
    late: list[str] = field(default_factory=list)  # (a)
    overlaps: list[str] = field(default_factory=list)  # (b)
    states: list[str] = field(default_factory=list)  # (c)
    effects: list[str] = field(default_factory=list)  # (d): steps committed twice, after a cancel, unknown
    missing: list[str] = field(default_factory=list)  # (d): steps that never committed (never run)
    lags: list[float] = field(default_factory=list)  # waits while the worker idled
    raw_lags: list[float] = field(default_factory=list)  # waits in all
    slowest: list[str] = field(default_factory=list)  # the slowest pick-ups, for the summary

    def lag_summary(self) -> str:
        return f"in all {_quantiles(self.raw_lags)}; while the worker idled {_quantiles(self.lags)}"


def _quantiles(lags: list[float]) -> str:
    if not lags:
        return "no pick-ups"
    q = sorted(lags)
    p99 = q[min(len(q) - 1, int(0.99 * len(q)))]
    return (f"{len(q)} pick-ups: p50 {statistics.median(q) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, "
            f"max {q[-1] * 1000:.0f} ms")  # fmt: skip


def read_runs(directory: Path, endings: list[Ending]) -> dict[Key, list[Run]]:
    runs: dict[str, Run] = {}
    path = directory / "runs.log"
    lines = path.read_text().splitlines() if path.exists() else []
    for line in lines:
        e = json.loads(line)
        if e["ev"] == "start":
            runs[e["u"]] = Run((e["w"], e["i"]), e["pid"], e["t"])
        else:
            runs[e["u"]].end, runs[e["u"]].out = e["t"], e["out"]
    by_key: dict[Key, list[Run]] = {}
    for r in runs.values():
        if r.end is None:
            for ending in endings:
                if r.pid in ending.pids:
                    r.end, r.ended_by_death = ending.dead_at, True
        by_key.setdefault(r.key, []).append(r)
    for rs in by_key.values():
        rs.sort(key=lambda r: r.start)
    return by_key


def derived_marks(model: Model, runs: dict[Key, list[Run]], endings: list[Ending], lease: float) -> list[Mark]:
    """Marks that follow from runs: an ``Unfinished(after=S)`` is claimable S after it ended; a
    run killed with its coordinator is claimable again once its lease expires (one that ended
    just before the kill may have committed: optional)."""
    marks = []
    for key, rs in runs.items():
        job = model.jobs[key[1]]
        for r in rs:
            if r.out == "unfinished" and not r.ended_by_death:
                assert r.end is not None
                delay = float(job.action.partition(":")[2])
                marks.append(Mark(key, r.end + delay, r.end + delay, "unfinished(after)", tol=EARLY_TOL))
            for e in endings:
                if r.pid in e.pids and (r.ended_by_death or (r.end is not None and r.end > e.at - 2.0)):
                    # Killed mid-run it committed nothing: it must run again once the lease
                    # expires. Ended just before, it may have committed: no run is owed.
                    at = e.dead_at if e.graceful else e.at + lease
                    why = "run killed with its coordinator" if r.ended_by_death else "run of an ended coordinator"
                    marks.append(Mark(key, e.at, at, why, optional=not r.ended_by_death))
    return marks


def pickups(model: Model, runs: dict[Key, list[Run]], starts: list[float], endings: list[Ending],
            lease: float) -> list[Pickup]:  # fmt: skip
    idle = {w: Idle(w, runs, lease) for w in WORKERS}
    found = []
    for m in model.marks + derived_marks(model, runs, endings, lease):
        job = model.jobs[m.key[1]]
        run = next((r for r in runs.get(m.key, []) if r.start >= m.lower - m.tol), None)
        cancelled = job.cancelled.get(m.key[0])
        if cancelled is not None and (run is None or run.start >= cancelled):
            continue  # cancelled before it was picked up
        at = m.at
        for e in endings:
            if m.at < e.at and (run is None or run.start > e.at):
                at = max(at, e.dead_at if e.graceful else e.at + lease)
        p = Pickup(m, run, at)
        if run is not None:
            p.raw = max(0.0, run.start - at)
            p.lag = idle[m.key[0]].between(at, run.start)
        found.append(p)
    return [p for p in found if not _moot(p, found)]


def _moot(p: Pickup, found: list[Pickup]) -> bool:
    """An optional mark (a run that ended just before its coordinator did, and may have
    committed) whose run answers a later mark of the item that is not optional: a reset of
    the failure it committed, say. That mark, not this one, says when the run was owed."""
    return p.mark.optional and p.run is not None and any(
        q.run is p.run and not q.mark.optional and q.mark.lower >= p.mark.lower for q in found)  # fmt: skip


def check_pickups(found: list[Pickup], f: Findings) -> None:
    ranked = sorted((p for p in found if p.raw is not None), key=lambda p: -(p.raw or 0.0))
    f.slowest = [f"{p.raw:.2f} s (idle {p.lag:.2f} s) {p.mark.key} {p.mark.why} at {p.at:.3f}" for p in ranked[:8]]
    served: dict[str, list[tuple[float, float, int]]] = {}  # worker -> (start, claimable at, key)
    for p in found:
        if p.run is not None and not p.mark.optional:
            served.setdefault(p.mark.key[0], []).append((p.run.start, p.at, p.mark.key[1]))
    for starts in served.values():
        starts.sort()
    for p in found:
        if p.run is None or p.lag is None or p.raw is None:
            if not p.mark.optional:
                f.late.append(f"{p.mark.key} never picked up: claimable since {p.at:.3f} ({p.mark.why})")
            continue
        if not p.mark.optional:
            f.lags.append(p.lag)
            f.raw_lags.append(p.raw)
        w, key = p.mark.key
        if p.lag > BOUND:
            f.late.append(f"{p.mark.key} waited {p.lag:.2f} s while its worker idled ({p.raw:.2f} s in all) "
                          f"from {p.at:.3f} ({p.mark.why})")  # fmt: skip
        elif p.raw > BOUND:
            # Rows that started at least OVERTAKE_SLACK before this one: rows of one claim
            # start within moments of each other in any order.
            until = p.run.start - OVERTAKE_SLACK
            window = served[w][bisect.bisect_left(served[w], (p.at,)) : bisect.bisect_left(served[w], (until,))]
            younger = [k for _, at, k in window if at > p.at + OVERTAKE_SLACK and k > key]
            if younger:
                f.late.append(f"{p.mark.key} waited {p.raw:.2f} s from {p.at:.3f} ({p.mark.why}) while {len(younger)} "
                              f"rows with higher keys claimable later ran first, e.g. {younger[:5]}")  # fmt: skip


def check_overlaps(model: Model, runs: dict[Key, list[Run]], f: Findings) -> None:
    for key, rs in runs.items():
        for a, b in itertools.pairwise(rs):
            if a.end is None:
                if key[0] not in model.jobs[key[1]].cancelled:  # a cancelled handler ended by its pod
                    f.overlaps.append(f"{key}: a run from {a.start:.3f} (pid {a.pid}) never ended; another started {b.start:.3f}")
            elif a.end > b.start:
                f.overlaps.append(f"{key}: runs overlap: pid {a.pid} {a.start:.3f}-{a.end:.3f} and pid {b.pid} from {b.start:.3f}")


def check_runs(model: Model, runs: dict[Key, list[Run]], f: Findings) -> None:
    for key, rs in runs.items():
        job = model.jobs[key[1]]
        if job.never or key[0] not in job.workers():
            f.states.append(f"{key} ran but was never claimable ({job})")
        for a, b in itertools.pairwise(rs):
            if a.out == "unfinished" and a.end is not None and not a.ended_by_death:
                due = a.end + float(job.action.partition(":")[2])
                if b.start < due - EARLY_TOL:
                    f.states.append(f"{key} ran at {b.start:.3f}, before its Unfinished delay ended at {due:.3f}")


def statuses(engine: sa.Engine) -> dict[Key, tuple[str, str | None]]:
    found = {}
    with engine.connect() as conn:
        for w in WORKERS:
            rows = conn.execute(sa.text(f"SELECT source_id, execution_status, error FROM {w}_work"))
            for source_id, status, error in rows:
                found[(w, int(source_id))] = (status, error)
    return found


def mismatches(model: Model, found: dict[Key, tuple[str, str | None]]) -> list[str]:
    out = []
    for job in model.jobs.values():
        for w in WORKERS:
            status = found.get((w, job.id))
            want = job.expected(w)[0] if w in job.workers() else None
            got = None if status is None else status[0]
            if got != want:
                out.append(f"{(w, job.id)} is {status}, expected {want} ({job.action}, resets {job.resets}, "
                           f"cancelled {job.cancelled})")  # fmt: skip
            elif w in job.cancelled and status is not None and status[1] != "cancelled":
                out.append(f"{(w, job.id)} was cancelled but ended {status}")
    return out


def check_effects(model: Model, engine: sa.Engine, f: Findings) -> None:
    with engine.connect() as conn:
        rows = conn.execute(sa.text("SELECT worker, item_id, step, at FROM model_effects")).all()
    steps: dict[Key, dict[int, list[float]]] = {}
    for w, i, step, at in rows:
        steps.setdefault((w, int(i)), {}).setdefault(int(step), []).append(float(at))
    for job in model.jobs.values():
        for w in WORKERS:
            got = steps.pop((w, job.id), {})
            twice = {s: len(ats) for s, ats in got.items() if len(ats) > 1}
            if twice:
                f.effects.append(f"{(w, job.id)} committed steps more than once: {twice}")
            want = job.expected(w)[1] if w in job.workers() else 0
            if want == -1:
                tc = job.cancelled[w]
                late = [at for ats in got.values() for at in ats if at > tc]
                if late:
                    f.effects.append(f"{(w, job.id)} committed a step written after its cancel at {tc:.3f}: {late}")
            elif sorted(got) == list(range(1, len(got) + 1)) and len(got) < want:
                # The first steps committed once each, the rest never ran: liveness, like (a).
                f.missing.append(f"{(w, job.id)} committed steps {sorted(got)}, expected 1..{want} ({job.action})")
            elif sorted(got) != list(range(1, want + 1)):
                f.effects.append(f"{(w, job.id)} committed steps {sorted(got)}, expected 1..{want} ({job.action})")
    if steps:
        f.effects.append(f"effects of jobs the model does not know: {sorted(steps)}")


def check_all(model: Model, engine: sa.Engine, directory: Path, starts: list[float], endings: list[Ending],
              lease: float) -> Findings:  # fmt: skip
    f = Findings()
    runs = read_runs(directory, endings)
    check_pickups(pickups(model, runs, starts, endings, lease), f)
    check_overlaps(model, runs, f)
    check_runs(model, runs, f)
    f.states += mismatches(model, statuses(engine))
    check_effects(model, engine, f)
    return f


def describe(model: Model, runs: dict[Key, list[Run]], key: Key) -> dict[str, Any]:
    """Everything known of one (worker, job), for a failure message."""
    return {"job": model.jobs[key[1]], "marks": [m for m in model.marks if m.key == key], "runs": runs.get(key, [])}
