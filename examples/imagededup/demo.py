"""One command shows the whole system: `python -m examples.imagededup.demo` (`make demo`).

It starts the API (uvicorn), the worker service (`dbworker run`) and the console (`dbworker
console`, on loopback without a token) as processes on a SQLite file in a temporary directory,
uploads generated images over HTTP, asks for the duplicates of each, shows a progress bar,
retries the deliberately broken upload, prints the duplicate groups and a few worker metrics,
leaves one more broken upload failed to look at in the console, and stops every process with
SIGTERM (on a terminal, once you press Enter).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx

from examples.imagededup import samples, tracing

ROOT = Path(__file__).resolve().parents[2]
APP = "examples.imagededup.app:coordinator"
PAGE_SIZE = 8  # candidates per compare call: a query takes a few calls (Unfinished, then Finished)
METRIC_PREFIXES = (
    "dbworker_claims_total",
    "dbworker_executions_total",
    "dbworker_handler_duration_seconds_sum",
)


class DemoError(RuntimeError):
    """The demo could not complete; the message says which step and why."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Service:
    """A child process of the demo, its output going to a log file in the temp dir."""

    name: str
    argv: list[str]
    log_path: Path
    env: dict[str, str]
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        with self.log_path.open("wb") as log:
            # A session of its own: Ctrl-C in the terminal reaches only the demo, which
            # then stops the services in order instead of all at once.
            self.process = subprocess.Popen(
                self.argv,
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def check_running(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise DemoError(
                f"the {self.name} exited early (code {self.process.returncode}):\n{self.log_tail()}"
            )

    def stop(self, timeout: float) -> int | None:
        """SIGTERM, wait up to `timeout`, then SIGKILL the whole session; the exit code."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        return self.process.returncode

    def log_tail(self, lines: int = 20) -> str:
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        return "\n".join("    " + line for line in text.splitlines()[-lines:])


class ProgressBar:
    """A one-line bar redrawn in place on a terminal, printed every few seconds otherwise."""

    def __init__(self, out: TextIO, width: int = 24) -> None:
        self.out, self.width = out, width
        self.tty = out.isatty()
        self.last_text, self.last_print = "", 0.0

    def bar(self, done: int, total: int) -> str:
        filled = self.width * done // total if total else self.width
        return "[" + "#" * filled + "-" * (self.width - filled) + f"] {done}/{total}"

    def show(self, progress: dict[str, dict[str, int]], *, final: bool = False) -> None:
        parts = []
        for label, key in (("hashes", "hash"), ("duplicate queries", "compare")):
            counts = progress[key]
            done = counts["finished"] + counts["failed"]
            failed = f" ({counts['failed']} failed)" if counts["failed"] else ""
            parts.append(f"{label} {self.bar(done, counts['total'])}{failed}")
        text = "  ".join(parts)
        if self.tty:
            if text != self.last_text or final:
                # \x1b[K clears what a longer previous line left behind.
                self.out.write("\r" + text + "\x1b[K" + ("\n" if final else ""))
                self.out.flush()
        elif final or (text != self.last_text and time.monotonic() - self.last_print >= 2):
            self.out.write(text + "\n")
            self.out.flush()
            self.last_print = time.monotonic()
        self.last_text = text


def wait_for(
    check: Callable[[], bool], *, timeout: float, what: str, services: Iterable[Service]
) -> None:
    deadline = time.monotonic() + timeout
    while True:
        for service in services:
            service.check_running()
        try:
            if check():
                return
        except httpx.HTTPError:
            pass  # not listening yet
        if time.monotonic() > deadline:
            raise DemoError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.1)


def settled(counts: dict[str, int]) -> bool:
    return counts["pending"] == 0


def groups_from(queries: list[dict[str, Any]]) -> list[set[int]]:
    """Connected images (union of every query's matches), largest groups first."""
    parent: dict[int, int] = {}

    def root(i: int) -> int:
        parent.setdefault(i, i)
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for query in queries:
        for match in query.get("matches", []):
            parent[root(match["image_id"])] = root(query["image_id"])
    found: dict[int, set[int]] = {}
    for image in parent:
        found.setdefault(root(image), set()).add(image)
    return sorted((g for g in found.values() if len(g) > 1), key=lambda g: (-len(g), min(g)))


def services(database_url: str, workdir: Path, *, poll_seconds: float = 0.1,
             otel_endpoint: str | None = None) -> tuple[Service, Service, int, int]:  # fmt: skip
    """The API and the worker service on ``database_url`` (not started): api, worker, their ports.

    ``otel_endpoint``: both export their spans there (OTLP/HTTP), as ``imagededup-api`` and
    ``imagededup-worker``."""
    api_port, metrics_port = free_port(), free_port()
    env = {**os.environ, "DATABASE_URL": database_url, "IMAGEDEDUP_API_URL": f"http://127.0.0.1:{api_port}"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    if otel_endpoint is not None:
        env.update(OTEL_EXPORTER_OTLP_ENDPOINT=otel_endpoint, OTEL_BSP_SCHEDULE_DELAY="500",
                   OTEL_SERVICE_NAME="imagededup-api")  # fmt: skip
    api = Service(
        "API",
        [
            sys.executable,
            "-m",
            "uvicorn",
            "examples.imagededup.api:app",
            "--host",
            "127.0.0.1",
            "--port",
            str(api_port),
            "--log-level",
            "warning",
        ],
        workdir / "api.log",
        env,
    )
    worker = Service(
        "worker service",
        [
            sys.executable,
            "-m",
            "dbworker",
            "run",
            APP,
            "--metrics-host",
            "127.0.0.1",
            "--metrics-port",
            str(metrics_port),
            "--poll-seconds",
            str(poll_seconds),
            "--max-poll-seconds",
            "0.5",
            "--drain-seconds",
            "20",
        ],
        workdir / "worker.log",
        {**env, "OTEL_SERVICE_NAME": "imagededup-worker"} if otel_endpoint is not None else env,
    )
    return api, worker, api_port, metrics_port


def console_service(database_url: str, workdir: Path) -> tuple[Service, int]:
    """`dbworker console` on ``database_url`` (not started), on loopback without a token: only
    this machine reaches it, and everyone who does is `local` (docs/console.md)."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "DBWORKER_CONSOLE_TOKEN"}
    env["DATABASE_URL"] = database_url
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    argv = [sys.executable, "-m", "dbworker", "console", APP, "--host", "127.0.0.1", "--port", str(port)]
    return Service("console", argv, workdir / "console.log", env), port


def run(groups: int, timeout: float, out: TextIO, *, wait: bool = False) -> int:
    workdir = Path(tempfile.mkdtemp(prefix="imagededup-demo-"))
    database_url = f"sqlite:///{workdir / 'imagededup.sqlite'}"
    receiver = _trace_receiver(workdir, out)
    api, worker, api_port, metrics_port = services(
        database_url, workdir, otel_endpoint=None if receiver is None else receiver.endpoint
    )
    console, console_port = console_service(database_url, workdir)
    out.write(
        f"imagededup demo: SQLite database and logs in {workdir} (removed if all goes well)\n"
    )
    result = 1
    try:
        result = demo_steps(api, worker, api_port, metrics_port, groups, timeout, out)
        if result == 0:
            look_at_a_failure(api, worker, console, api_port, console_port, timeout, out)
            if wait:
                out.write("\nthe API, the workers and the console keep running: press Enter to stop them\n")
                out.flush()
                try:
                    input()
                except EOFError:  # stdin closed: nothing more to wait for
                    pass
    except (DemoError, httpx.HTTPError) as exc:
        out.write(f"\ndemo failed: {exc}\n")
        for service in (api, worker, console):
            out.write(
                f"  last lines of the {service.name} log ({service.log_path}):\n{service.log_tail()}\n"
            )
    finally:
        say(out, "\nstopping the worker service, the console, then the API (SIGTERM, drain, exit)...\n")
        # All are stopped before anything else is reported: a closed stdout must not
        # leave them running.
        codes = [(service.name, service.stop(timeout=30)) for service in (worker, console, api)]
        for name, code in codes:
            if code is None:
                continue  # never started
            # uvicorn re-raises SIGTERM once its graceful shutdown is done.
            clean = code in (0, -signal.SIGTERM)
            say(out, f"  {name}: {'stopped cleanly' if clean else f'exit code {code}'}\n")
            if not clean:
                result = 1
    if receiver is not None:
        receiver.close()
        if result == 0:
            tracing.print_upload_trace(receiver.path, out)
    if result == 0:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        out.write(f"the database and the logs are kept in {workdir}\n")
    return result


def _trace_receiver(workdir: Path, out: TextIO) -> tracing.Receiver | None:
    """Where the API and the workers send their spans (``traces.jsonl``); None without the
    ``otel`` extra (and opentelemetry-proto), then the demo runs untraced."""
    try:
        return tracing.Receiver(workdir / "traces.jsonl")
    except ImportError:
        out.write("(no OpenTelemetry: install dbworker[otel] and opentelemetry-proto to see the upload's trace)\n")
        return None


def demo_steps(
    api: Service,
    worker: Service,
    api_port: int,
    metrics_port: int,
    groups: int,
    timeout: float,
    out: TextIO,
) -> int:
    client = httpx.Client(base_url=f"http://127.0.0.1:{api_port}", timeout=30)
    api.start()
    # The API creates the schema as it starts; the workers come up once it has.
    wait_for(
        lambda: client.get("/healthz").status_code == 200,
        timeout=60,
        what="the API",
        services=[api],
    )
    out.write(f"API listening on http://127.0.0.1:{api_port} (try /docs)\n")
    worker.start()
    wait_for(
        lambda: httpx.get(f"http://127.0.0.1:{metrics_port}/readyz", timeout=5).status_code == 200,
        timeout=60,
        what="the worker service to be ready",
        services=[api, worker],
    )
    out.write(f"worker service running: dbworker run {APP} (metrics on :{metrics_port})\n")

    sample_files = samples.generate(groups)
    uploaded: dict[int, samples.Sample] = {}
    for start in range(0, len(sample_files), 8):
        batch = sample_files[start : start + 8]
        files = [("files", (s.filename, s.content, "application/octet-stream")) for s in batch]
        response = client.post("/images", files=files)
        response.raise_for_status()
        uploaded.update({row["id"]: s for row, s in zip(response.json(), batch, strict=True)})
    out.write(
        f"uploaded {len(uploaded)} images ({groups} originals, their near-duplicates, 1 corrupt file)\n"
    )
    # Asked at once: each query waits, through its eligible query, for the hashes it needs.
    query_ids = {
        image_id: client.post(
            f"/images/{image_id}/duplicates", json={"page_size": PAGE_SIZE}
        ).json()["id"]
        for image_id in uploaded
    }
    out.write(
        f"asked for the duplicates of each image: {len(query_ids)} queries, compared page by page\n"
    )

    bar = ProgressBar(out)

    def all_settled() -> bool:
        progress = client.get("/progress").json()
        done = settled(progress["hash"]) and settled(progress["compare"])
        bar.show(progress, final=done)
        return done

    wait_for(all_settled, timeout=timeout, what="the hashes and queries", services=[api, worker])

    failed_images = client.get("/images", params={"hash_status": "failed"}).json()
    failed_queries = client.get("/queries", params={"status": "failed"}).json()
    out.write("\nfailures, as the API reports them (workers[name].state()):\n")
    for image in failed_images:
        out.write(f"  image {image['id']} {image['filename']}: {image['error']}\n")
    for query in failed_queries:
        out.write(f"  query {query['id']}: {query['error']}\n")
    for image in failed_images:
        out.write(
            f"fixing image {image['id']}: new bytes (PUT), then retry its hash and its query (reset_failed)\n"
        )
        fixed = samples.replacement()
        client.put(
            f"/images/{image['id']}", files={"file": (fixed.filename, fixed.content)}
        ).raise_for_status()
        client.post(f"/images/{image['id']}/retry").raise_for_status()
        uploaded[image["id"]] = fixed
    for query in failed_queries:
        client.post(f"/queries/{query['id']}/retry").raise_for_status()
    wait_for(all_settled, timeout=timeout, what="the retried work", services=[api, worker])

    queries = client.get("/queries", params={"limit": 1000}).json()
    found = groups_from(queries)
    out.write(f"\nduplicate groups found ({len(found)}):\n")
    for number, group in enumerate(found, 1):
        names = ", ".join(sorted(uploaded[i].filename for i in group))
        out.write(f"  {number}. {names}\n")
    expected = sorted(
        (
            g
            for g in ({i for i, s in uploaded.items() if s.group == n} for n in range(groups))
            if len(g) > 1
        ),
        key=lambda g: (-len(g), min(g)),
    )
    correct = sorted(map(sorted, found)) == sorted(map(sorted, expected))
    out.write(
        f"  {'all' if correct else 'NOT all'} {len(expected)} groups of near-duplicates found "
        f"{'exactly' if correct else '(see above)'}; "
        f"{sum(q['status'] == 'finished' for q in queries)}/{len(queries)} queries finished\n"
    )

    metrics = httpx.get(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).text
    out.write(f"\nworker metrics (excerpt of http://127.0.0.1:{metrics_port}/metrics):\n")
    for line in metrics_excerpt(metrics):
        out.write(f"  {line}\n")
    return 0 if correct else 1


def look_at_a_failure(
    api: Service,
    worker: Service,
    console: Service,
    api_port: int,
    console_port: int,
    timeout: float,
    out: TextIO,
) -> None:
    """Start the console, upload one more broken image and leave its hash failed there."""
    client = httpx.Client(base_url=f"http://127.0.0.1:{api_port}", timeout=30)
    address = f"http://127.0.0.1:{console_port}"
    console.start()
    wait_for(
        lambda: httpx.get(f"{address}/healthz", timeout=5).status_code == 200,
        timeout=60,
        what="the console",
        services=[api, worker, console],
    )
    broken = samples.corrupt()
    response = client.post(
        "/images", files=[("files", ("left-failed.png", broken.content, "application/octet-stream"))]
    )
    response.raise_for_status()
    image_id = response.json()[0]["id"]

    def failed() -> bool:
        images = client.get("/images", params={"hash_status": "failed"}).json()
        return any(image["id"] == image_id for image in images)

    wait_for(failed, timeout=timeout, what="the hash of the image left failed", services=[api, worker])
    item = f"{address}/workers/hash/items/{image_id}"
    # What the console shows is checked before it is advertised.
    page = httpx.get(item, timeout=10, follow_redirects=True)
    if page.status_code != 200 or "UnreadableImageError" not in page.text:
        raise DemoError(f"the console's page {item} does not show the failure (HTTP {page.status_code})")
    out.write(
        f"\nconsole: {address}/ (dbworker console {APP}; loopback only, so no token)\n"
        f"  left failed to look at: image {image_id} (left-failed.png), its hash at {item}\n"
        f"  the failed list, with Retry: {address}/workers/hash?status=failed\n"
    )


def say(out: TextIO, text: str) -> None:
    """Write while shutting down; a reader that went away (`| head`) is no reason to stop."""
    try:
        out.write(text)
        out.flush()
    except OSError:
        pass


def metrics_excerpt(text: str) -> list[str]:
    """The interesting non-zero samples of the worker service's metrics."""
    lines = []
    for line in text.splitlines():
        if line.startswith(METRIC_PREFIXES) and not line.endswith((" 0.0", " 0")):
            lines.append(line)
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.imagededup.demo", description=__doc__)
    parser.add_argument(
        "--groups", type=int, default=10, help="distinct originals to generate (default 10)"
    )
    parser.add_argument(
        "--timeout", type=float, default=120, help="seconds the work may take (default 120)"
    )
    parser.add_argument(
        "--wait",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep the services (and the console) running until Enter is pressed "
        "(default: when stdin is a terminal)",
    )
    args = parser.parse_args(argv)
    if args.groups < 1:
        parser.error(f"--groups must be at least 1, got {args.groups}")
    wait = sys.stdin.isatty() if args.wait is None else args.wait
    try:
        return run(args.groups, args.timeout, sys.stdout, wait=wait)
    except KeyboardInterrupt:  # the services were stopped on the way out
        return 130


if __name__ == "__main__":
    sys.exit(main())
