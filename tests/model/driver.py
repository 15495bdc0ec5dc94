"""The random driver: ``steps`` operations drawn from ``random.Random(seed)`` against two real
coordinator processes, each recorded in the model (``model.py``) with the times that bound
when its rows became claimable.

Operations: inserts (single, batched, enabled or not, above the highest key or into a gap
below keys already processed), rows enabled behind the cursor, rows held by another open
transaction (PostgreSQL: a FOR KEY SHARE lock the claim's FOR UPDATE cannot take while the
row is enabled, released without any write; PostgreSQL/MariaDB: an uncommitted update that
enables rows, and FOR UPDATE on rows just inserted; SQLite: a write transaction held open),
``reset_failed`` of failed items, cancels, and coordinators SIGKILLed or SIGTERMed and
restarted. Handlers finish (after a sleep), return ``Unfinished(after=)`` or raise (see
``tests.apps.model_app``).
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from dbworker import Coordinator
from tests.apps.model_app import Job as JobRow
from tests.model.fleet import Fleet
from tests.model.model import Job, Mark, Model

GAP = 4  # keys are allocated in steps of GAP, so rows can be inserted below processed ones


class Driver:
    def __init__(self, rng: random.Random, backend: str, url: str, engine: sa.Engine, coordinator: Coordinator,
                 fleet: Fleet, model: Model, directory: Any) -> None:  # fmt: skip
        self.rng = rng
        self.backend = backend
        self.url = url
        self.engine = engine
        self.coordinator = coordinator
        self.fleet = fleet
        self.model = model
        self.directory = directory
        self.next_id = GAP
        self.holds: list[threading.Thread] = []
        self.errors: list[BaseException] = []
        self.log: list[str] = []

    # -- what rows hold -------------------------------------------------------------------

    def _action(self) -> str:
        r = self.rng.random()
        if r < 0.5:
            return "finish:0"
        if r < 0.65:
            return f"finish:{self.rng.choice([0.1, 0.3, 0.8, 1.5])}"
        if r < 0.82:
            return f"later:{self.rng.choice([0.2, 0.5, 1.0, 2.0])}"
        return f"fail:{self.rng.choice([1, 1, 2])}"

    def _new_job(self, *, enabled: bool, behind: bool = False, never: bool = False) -> Job:
        key = None
        if behind and self.next_id > 3 * GAP:
            for _ in range(20):
                k = self.rng.randrange(1, self.next_id - 2 * GAP)
                if k not in self.model.jobs:
                    key = k
                    break
        if key is None:
            key = self.next_id
            self.next_id += GAP
        job = Job(key, self._action(), self.rng.choice("aab"), enabled, never=never)
        self.model.jobs[key] = job
        return job

    def _rows(self, jobs: list[Job]) -> list[dict[str, Any]]:
        return [{"id": j.id, "enabled": j.enabled, "action": j.action, "lane": j.lane} for j in jobs]

    def _insert(self, jobs: list[Job]) -> tuple[float, float]:
        with Session(self.engine) as s:
            s.execute(sa.insert(JobRow), self._rows(jobs))
            t0 = time.time()
            s.commit()
        return t0, time.time()

    def _enable(self, jobs: list[Job]) -> tuple[float, float]:
        with Session(self.engine) as s:
            s.execute(sa.update(JobRow).where(JobRow.id.in_([j.id for j in jobs])).values(enabled=True))
            t0 = time.time()
            s.commit()
        return t0, time.time()

    def _disabled(self, n: int) -> list[Job]:
        pool = [j for j in self.model.jobs.values() if not j.enabled and not j.never]
        pool.sort(key=lambda j: j.id)
        if not pool:
            return []
        # Mostly the lowest keys: those the cursor has passed long ago.
        start = 0 if self.rng.random() < 0.6 else self.rng.randrange(len(pool))
        return pool[start : start + n]

    # -- operations ------------------------------------------------------------------------

    def insert_one(self) -> None:
        job = self._new_job(enabled=True, behind=self.rng.random() < 0.3)
        t0, t1 = self._insert([job])
        self.model.mark(job, t0, t1, "insert")

    def insert_batch(self) -> None:
        behind = self.rng.random() < 0.3
        jobs = [self._new_job(enabled=self.rng.random() < 0.8, behind=behind) for _ in range(self.rng.randint(2, 20))]
        t0, t1 = self._insert(jobs)
        for j in jobs:
            if j.enabled:
                self.model.mark(j, t0, t1, "insert batch")

    def insert_disabled(self) -> None:
        jobs = [self._new_job(enabled=False, behind=self.rng.random() < 0.3) for _ in range(self.rng.randint(1, 6))]
        self._insert(jobs)

    def enable(self) -> None:
        jobs = self._disabled(self.rng.choice([1, 1, 3, 8]))
        if not jobs:
            return self.insert_disabled()
        for j in jobs:
            j.enabled = True
        t0, t1 = self._enable(jobs)
        for j in jobs:
            self.model.mark(j, t0, t1, "enable")

    def hold(self) -> None:
        if len(self.holds) - sum(not t.is_alive() for t in self.holds) >= 2:
            return self.insert_one()
        kinds = {"sqlite": ["sqlite_write"], "postgresql": ["key_share", "uncommitted", "lock_fresh"],
                 "mariadb": ["uncommitted", "lock_fresh"]}[self.backend]  # fmt: skip
        kind = self.rng.choice(kinds)
        seconds = self.rng.uniform(0.2, 1.0) if self.backend == "sqlite" else self.rng.uniform(0.5, 4.0)
        if kind == "lock_fresh":
            jobs = [self._new_job(enabled=True) for _ in range(self.rng.randint(1, 5))]
        else:
            jobs = self._disabled(self.rng.choice([1, 2, 4]))
            if not jobs:
                jobs = [self._new_job(enabled=False, behind=True)]
                self._insert(jobs)
            for j in jobs:
                j.enabled = True
        self.log.append(f"hold {kind} {seconds:.1f}s {[j.id for j in jobs]}")
        thread = threading.Thread(target=self._hold_guarded, args=(kind, jobs, seconds), daemon=True)
        thread.start()
        self.holds.append(thread)

    def _hold_guarded(self, kind: str, jobs: list[Job], seconds: float) -> None:
        try:
            getattr(self, "_hold_" + kind)(jobs, seconds)
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)

    def _hold_key_share(self, jobs: list[Job], seconds: float) -> None:
        # Held FOR KEY SHARE while another transaction enables the rows (an update of a non-key
        # column does not wait for it), then released without any write: no trigger fires.
        ids = [j.id for j in jobs]
        with self.engine.connect() as held:
            held.execute(sa.select(JobRow.id).where(JobRow.id.in_(ids)).with_for_update(read=True, key_share=True)).all()
            t0, _ = self._enable(jobs)
            time.sleep(seconds)
            held.commit()
        t1 = time.time()
        for j in jobs:
            self.model.mark(j, t0, t1, "released key share")

    def _hold_uncommitted(self, jobs: list[Job], seconds: float) -> None:
        with self.engine.connect() as held:
            held.execute(sa.update(JobRow).where(JobRow.id.in_([j.id for j in jobs])).values(enabled=True))
            time.sleep(seconds)
            t0 = time.time()
            held.commit()
        t1 = time.time()
        for j in jobs:
            self.model.mark(j, t0, t1, "uncommitted update committed")

    def _hold_lock_fresh(self, jobs: list[Job], seconds: float) -> None:
        # Rows just committed, locked FOR UPDATE by the application before the claim (or not:
        # those a claim took first are skipped and count from the insert).
        t0, t1 = self._insert(jobs)
        with self.engine.connect() as held:
            q = sa.select(JobRow.id).where(JobRow.id.in_([j.id for j in jobs])).with_for_update(skip_locked=True)
            locked = set(held.execute(q).scalars())
            time.sleep(seconds)
            held.commit()
        t2 = time.time()
        for j in jobs:
            self.model.mark(j, t0, t2 if j.id in locked else t1, "locked fresh" if j.id in locked else "insert")

    def _hold_sqlite_write(self, jobs: list[Job], seconds: float) -> None:
        path = self.url.removeprefix("sqlite:///")
        conn = sqlite3.connect(path, timeout=30, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute(f"UPDATE model_jobs SET enabled = 1 WHERE id IN ({','.join(str(j.id) for j in jobs)})")
            time.sleep(seconds)
            t0 = time.time()
            conn.execute("COMMIT")
        finally:
            conn.close()
        t1 = time.time()
        for j in jobs:
            self.model.mark(j, t0, t1, "write transaction committed")

    def reset(self) -> None:
        candidates = [(w, j) for j in self.model.jobs.values() if j.action.startswith("fail") and j.enabled
                      for w in j.workers() if w not in j.cancelled]  # fmt: skip
        self.rng.shuffle(candidates)
        for w, j in candidates[:10]:
            with Session(self.engine) as s:
                state = self.coordinator.workers[w].state(s, j.id)
            if state is None or state["execution_status"] != "failed":
                continue
            # FAILED and not cancelled: no handler runs it, so none reads the count meanwhile.
            with open(self.directory / f"reset-{w}-{j.id}", "ab") as f:
                f.write(b"r")
            with Session(self.engine) as s:
                assert self.coordinator.workers[w].reset_failed(s, j.id)
                t0 = time.time()
                s.commit()
            j.resets[w] = j.resets.get(w, 0) + 1
            self.model.add(Mark((w, j.id), t0, time.time(), "reset"))
            return

    def cancel(self) -> None:
        pool = [j for j in self.model.jobs.values() if not j.never and (not j.enabled or j.action != "finish:0")]
        if not pool:
            return
        j = self.rng.choice(pool)
        w = self.rng.choice(j.workers())
        if w in j.cancelled:
            return
        with Session(self.engine) as s:
            cancelled = self.coordinator.workers[w].cancel(s, j.id)
            s.commit()
        if cancelled:
            j.cancelled[w] = time.time()
            self.log.append(f"cancel {w} {j.id}")

    def restart(self, *, graceful: bool) -> None:
        slot = self.rng.choice(sorted(self.fleet.procs))
        ending = self.fleet.end(slot, graceful=graceful)
        self.log.append(f"{'sigterm' if graceful else 'sigkill'} slot {slot} at {ending.at:.3f}")
        time.sleep(self.rng.uniform(0, 1.0))
        self.fleet.start(slot)

    # -- the run ---------------------------------------------------------------------------

    def run(self, steps: int) -> None:
        ops = [(self.insert_one, 5), (self.insert_batch, 2), (self.insert_disabled, 2), (self.enable, 4),
               (self.hold, 2), (self.reset, 2), (self.cancel, 1)]  # fmt: skip
        funcs, weights = zip(*ops, strict=True)
        kills = {steps // 3: False, (2 * steps) // 3: True}  # at least one SIGKILL and one SIGTERM
        for step in range(steps):
            if step in kills:
                self.restart(graceful=kills[step])
            elif steps > 300 and self.rng.random() < 0.004:
                self.restart(graceful=self.rng.random() < 0.3)
            else:
                op = self.rng.choices(funcs, weights)[0]
                op()
            time.sleep(self.rng.uniform(0, 0.25))
        for _ in range(3):  # rows that stay disabled: they must never run
            job = self._new_job(enabled=False, never=True)
            self._insert([job])
        for thread in self.holds:
            thread.join(timeout=60)
            if thread.is_alive():
                self.errors.append(AssertionError("a hold transaction did not end within 60 s"))
        # Everything still disabled is enabled at the end, so every row has an expected end.
        rest = [j for j in self.model.jobs.values() if not j.enabled and not j.never]
        if rest:
            for j in rest:
                j.enabled = True
            t0, t1 = self._enable(rest)
            for j in rest:
                self.model.mark(j, t0, t1, "enable at the end")

