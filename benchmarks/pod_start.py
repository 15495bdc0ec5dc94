"""How fast a pod's handler processes start, and what they cost: the `dbworker` command with
``--concurrency start=N`` on a SQLite file of N items that each hold their process for 1 s.

Prints, per checkout and repeat: seconds from the command's start until all N items were
committed by N distinct handler processes (1 s of it is the handlers' own sleep), the CPU
seconds of the pod's processes until then (the command, the fork server, the handler
processes) and their proportional memory (PSS). ``--libraries`` compares checkouts in turns:

    .venv/bin/python -m benchmarks.pod_start --concurrency 8 --repeats 3 --libraries .,../main-checkout
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parent.parent


def one_run(library: Path, n: int) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/start.sqlite"
        engine = sa.create_engine(url)
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE start_items (id INTEGER PRIMARY KEY, pid INTEGER)"))
            conn.execute(sa.text("INSERT INTO start_items (id) VALUES (:id)"), [{"id": i} for i in range(1, n + 1)])
        # The application as a module of its own, beside the database: ``library`` may be a
        # checkout whose ``benchmarks`` has no start_app; its dbworker is the one imported.
        shutil.copy(ROOT / "benchmarks" / "start_app.py", Path(tmp) / "start_app.py")
        env = {**os.environ, "DATABASE_URL": url, "PYTHONPATH": f"{library}{os.pathsep}{tmp}"}
        command = [sys.executable, "-m", "dbworker", "run", "start_app:coordinator", "--worker", "start",
                   "--concurrency", f"start={n}", "--create-tables", "--metrics-port", "0"]  # fmt: skip
        started = time.monotonic()
        pod = subprocess.Popen(command, cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while True:
                with engine.connect() as conn:
                    ran = conn.scalar(sa.text("SELECT count(DISTINCT pid) FROM start_items WHERE pid IS NOT NULL"))
                if ran == n:
                    break
                if pod.poll() is not None:
                    raise SystemExit(f"the pod exited with {pod.returncode}")
                time.sleep(0.01)
            seconds = time.monotonic() - started
            procs = [psutil.Process(pod.pid), *psutil.Process(pod.pid).children(recursive=True)]
            cpu = sum(p.cpu_times().user + p.cpu_times().system for p in procs)
            pss = sum(p.memory_full_info().pss for p in procs) / 2**20
        finally:
            pod.terminate()
            pod.wait(60)
        engine.dispose()
    return seconds, cpu, pss


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--libraries", default=str(ROOT), help="comma-separated checkouts, run in turns")
    args = parser.parse_args()
    libraries = [Path(p).resolve() for p in args.libraries.split(",")]
    results: dict[Path, list[tuple[float, float, float]]] = {lib: [] for lib in libraries}
    for _ in range(args.repeats):
        for lib in libraries:
            results[lib].append(one_run(lib, args.concurrency))
    print(f"| dbworker from | {args.concurrency} items done, s | pod CPU, s | pod PSS, MiB |")
    print("|---|---|---|---|")
    for lib, runs in results.items():
        cols = [statistics.median(r[k] for r in runs) for k in range(3)]
        print(f"| {lib} | {cols[0]:.2f} | {cols[1]:.2f} | {cols[2]:.0f} |")


if __name__ == "__main__":
    main()
