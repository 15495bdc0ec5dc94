"""The reference model: what the driver did to each job, and from when each (worker, job) was
claimable. The checks (``checks.py``) hold the handlers' runs against it."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from tests.apps.model_app import WORKERS

Key = tuple[str, int]  # (worker, job id)


@dataclass
class Mark:
    """A moment a (worker, job) became claimable: a run must start within the bound of ``at``.

    ``lower``: no run answering this mark may start before it (less ``tol``), e.g. the start
    of the commit that made the row claimable. ``optional``: a pick-up is not required (a run
    of a killed coordinator that may have committed just before it died)."""

    key: Key
    lower: float
    at: float
    why: str
    tol: float = 0.05
    optional: bool = False


@dataclass
class Job:
    id: int
    action: str
    lane: str
    enabled: bool
    never: bool = False  # stays disabled to the end: must never run
    resets: dict[str, int] = field(default_factory=dict)
    cancelled: dict[str, float] = field(default_factory=dict)  # worker -> cancel's commit time

    def workers(self) -> tuple[str, ...]:
        return WORKERS if self.lane == "b" else ("alpha",)

    def expected(self, worker: str) -> tuple[str | None, int]:
        """The final status (None: never claimed) and how many steps commit an effect."""
        if self.never:
            return None, 0
        if worker in self.cancelled:
            return "failed", -1  # -1: at most one effect per step, none after the cancel
        kind, _, arg = self.action.partition(":")
        if kind == "fail" and self.resets.get(worker, 0) < int(arg):
            return "failed", 0
        return "finished", 2 if kind == "later" else 1


class Model:
    """Jobs by id and the claimable marks, shared with the driver's hold threads."""

    def __init__(self) -> None:
        self.jobs: dict[int, Job] = {}
        self.marks: list[Mark] = []
        self._lock = threading.Lock()

    def add(self, mark: Mark) -> None:
        with self._lock:
            self.marks.append(mark)

    def mark(self, job: Job, lower: float, at: float, why: str) -> None:
        with self._lock:
            for w in job.workers():
                if w not in job.cancelled:
                    self.marks.append(Mark((w, job.id), lower, at, why))
