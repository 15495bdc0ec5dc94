"""kopf handlers on an explicit registry: read, build, apply, report; nothing else.

Every trigger (a Worker created, changed or resumed; an owned Deployment changed or deleted;
the periodic resync) runs the same level-based ``reconcile``. No handler puts a finalizer on a
Worker (kopf timers would): deleting one is left to owner references, so a namespace never
hangs on an absent operator. The resync loop obeys kopf's peering rule (leadership.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import kopf

from dbworker_operator import (
    conditions,
    deletion_cost,
    drift,
    kinds,
    labels,
    leadership,
    problems,
    rules,
    scrape,
    tracing,
)
from dbworker_operator import kube as kubeapi
from dbworker_operator import spec as specs
from dbworker_operator.builders import owned
from dbworker_operator.config import OperatorConfig
from dbworker_operator.kube import Kube, KubeError, NotOwned
from dbworker_operator.metrics import RECONCILE_KINDS as metrics_kinds
from dbworker_operator.metrics import OperatorMetrics

registry = kopf.OperatorRegistry()
logger = logging.getLogger("dbworker_operator")

WORKER = kinds.WORKER
SETTINGS_PREFIX = "dbworker.dev"


@dataclass
class Runtime:
    """What the handlers share, kept in kopf's memo under ``runtime``."""

    config: OperatorConfig
    metrics: OperatorMetrics
    kube: Kube | None = None
    # Pods are scraped with a session of their own: the API session carries our token.
    scraper: aiohttp.ClientSession | None = None
    locks: dict[tuple[str, str], asyncio.Lock] = field(default_factory=dict)
    degraded: set[tuple[str, str]] = field(default_factory=set)
    resync_task: asyncio.Task[None] | None = None

    def client(self) -> Kube:
        if self.kube is None:
            raise RuntimeError("the Kubernetes client is not connected yet (startup has not run)")
        return self.kube


def _runtime(memo: Any) -> Runtime:
    runtime = memo["runtime"]
    assert isinstance(runtime, Runtime)  # set by __main__ before kopf starts
    return runtime


@kopf.on.login(registry=registry)
def login(settings: kopf.OperatorSettings, logger: Any, **_: Any) -> kopf.ConnectionInfo:
    # An explicit registry has none of kopf's default logins; ours is also what kube.py uses.
    return kubeapi.login(settings=settings, logger=logger)


@kopf.on.startup(registry=registry)
async def startup(settings: kopf.OperatorSettings, memo: Any, logger: logging.Logger | logging.LoggerAdapter[Any],
                  **_: Any) -> None:
    runtime = _runtime(memo)
    # kopf's bookkeeping goes to annotations with our prefix, never into the typed status.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=SETTINGS_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=SETTINGS_PREFIX, key="last-handled-configuration")
    settings.posting.enabled = False  # we post our own Events, deduplicated (kube.post_event)
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.peering.priority = runtime.config.priority
    runtime.kube = await Kube.connect(settings=settings, logger=logger)
    runtime.scraper = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=20),
                                            headers={"User-Agent": "dbworker-operator"})
    runtime.resync_task = asyncio.create_task(_resync_forever(runtime), name="dbworker-operator-resync")


@kopf.on.cleanup(registry=registry)
async def cleanup(memo: Any, **_: Any) -> None:
    runtime = _runtime(memo)
    if runtime.resync_task is not None:
        runtime.resync_task.cancel()
        await asyncio.gather(runtime.resync_task, return_exceptions=True)
    if runtime.kube is not None:
        await runtime.kube.close()
    if runtime.scraper is not None:
        await runtime.scraper.close()
    tracing.flush()


@kopf.on.resume(WORKER.group, WORKER.version, WORKER.plural, registry=registry)
@kopf.on.create(WORKER.group, WORKER.version, WORKER.plural, registry=registry)
@kopf.on.update(WORKER.group, WORKER.version, WORKER.plural, field="spec", registry=registry)
async def worker_changed(body: kopf.Body, reason: str, memo: Any, **_: Any) -> None:
    await reconcile(_runtime(memo), _plain(body), trigger=str(reason))


@kopf.on.event(kinds.DEPLOYMENT.group, kinds.DEPLOYMENT.version, kinds.DEPLOYMENT.plural,
               labels={"app.kubernetes.io/managed-by": labels.MANAGED_BY}, registry=registry)
async def deployment_event(body: kopf.Body, memo: Any, **_: Any) -> None:
    """An owned Deployment changed (rollout progress, someone's edit) or was deleted."""
    runtime = _runtime(memo)
    for ref in body.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("kind") == WORKER.kind and str(ref.get("apiVersion", "")).startswith(WORKER.group + "/"):
            worker = await runtime.client().get(WORKER, body["metadata"]["namespace"], ref["name"])
            if worker is not None and worker["metadata"].get("uid") == ref.get("uid"):
                await reconcile(runtime, worker, trigger="deployment")


def _plain(body: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": body.get("apiVersion"), "kind": body.get("kind"),
            "metadata": dict(body.get("metadata") or {}), "spec": dict(body.get("spec") or {}),
            "status": dict(body.get("status") or {})}


async def _resync_forever(runtime: Runtime) -> None:
    """Reconcile every Worker each ``resync_seconds``: drift, status, backlog, deletion costs."""
    while True:
        await asyncio.sleep(runtime.config.resync_seconds)
        try:
            await resync_once(runtime)
        except Exception:  # one failed pass must not end the loop
            logger.exception("resync pass failed; retrying in %ss", runtime.config.resync_seconds)


async def resync_once(runtime: Runtime) -> None:
    kube = runtime.client()
    config = runtime.config
    seen: set[tuple[str, str]] = set()
    for namespace in config.namespaces or (None,):
        if not config.standalone:
            peering = await kube.get_peering(config.peering, namespace)
            if not leadership.may_act(peering, identity=config.identity, priority=config.priority):
                continue
        for worker in await kube.list_objects(WORKER, namespace):
            seen.add((worker["metadata"]["namespace"], worker["metadata"]["name"]))
            await reconcile(runtime, worker, trigger="resync")
    runtime.metrics.workers.set(len(seen))
    # Forget Workers deleted since (their locks, their Degraded count).
    runtime.degraded &= seen
    runtime.metrics.degraded.set(len(runtime.degraded))
    for key in set(runtime.locks) - seen:
        if not runtime.locks[key].locked():
            del runtime.locks[key]
    runtime.metrics.resync_passes.inc()


async def reconcile(runtime: Runtime, body: dict[str, Any], *, trigger: str) -> None:
    """Make the cluster match one Worker and report what is true; never raises."""
    key = (body["metadata"].get("namespace", ""), body["metadata"]["name"])
    lock = runtime.locks.setdefault(key, asyncio.Lock())
    kind = trigger if trigger in metrics_kinds else "resync"
    started = time.monotonic()
    async with lock:
        try:
            with tracing.reconcile(*key, trigger=kind):
                await _reconcile(runtime, body)
        except Exception:  # a bug or outage for one Worker must not stop the others
            runtime.metrics.reconciles.labels(kind, "error").inc()
            logger.exception("reconciling Worker %s/%s failed", *key)
        else:
            runtime.metrics.reconciles.labels(kind, "ok").inc()
        finally:
            runtime.metrics.reconcile_duration.labels(kind).observe(time.monotonic() - started)


async def _check_secret(kube: Kube, spec: specs.WorkerSpec, config: OperatorConfig) -> problems.Problem | None:
    """Read the database Secret and say what is wrong with it; None when fine or not readable.

    Only in the namespaces the operator is told it may read Secrets in (config.py); elsewhere
    the pods report a missing Secret or key (problems.pod_problems), a little later.
    """
    if not config.may_read_secrets(spec.namespace):
        return None
    try:
        secret = await kube.get_secret(spec.namespace, spec.secret.name)
    except KubeError as exc:
        if exc.status == 403:  # not allowed to look: the pods will tell
            return None
        raise
    return problems.secret_problem(spec, secret)


async def _apply_all(kube: Kube, body: Mapping[str, Any], spec: specs.WorkerSpec, caps: kinds.Capabilities,
                     deployment: dict[str, Any] | None, runtime: Runtime
                     ) -> tuple[dict[str, Any] | None, list[str], list[problems.Problem]]:
    """Create, restore or delete every owned object; returns the Deployment, what changed, problems."""
    # ``deployment`` is what exists now; the applied one replaces it in the result.
    uid = body["metadata"]["uid"]
    changes: list[str] = []
    found: list[problems.Problem] = []
    for want in owned.objects(spec, caps):
        kind, name = want.kind, want.name
        try:
            if want.manifest is None:
                existing = await kube.get(kind, spec.namespace, name)
                if existing is not None and drift.owned_by(existing, uid):
                    await kube.delete(kind, spec.namespace, name)
                    changes.append(f"Deleted {kind.kind} {name}")
                    runtime.metrics.objects_applied.labels("deleted").inc()
                continue
            applied = await kube.apply(kind, owned.owned_by(want.manifest, body), owner_uid=uid,
                                       on_create=want.on_create)
            if kind is kinds.DEPLOYMENT and name == spec.name:  # the workers', not the console's
                deployment = applied.obj
            if applied.action != "unchanged":
                changes.append(f"{applied.action.capitalize()} {kind.kind} {name}")
                runtime.metrics.objects_applied.labels(applied.action).inc()
        except NotOwned as exc:
            found.append(problems.name_conflict(exc))
        except KubeError as exc:
            found.append(problems.apply_failed(kind, name, exc.message))
    return deployment, changes, found


async def _scrape(runtime: Runtime, pods: list[dict[str, Any]], port: int) -> int | None:
    """Read every running pod's metrics, keep deletion costs current; the Worker's backlog."""
    kube = runtime.client()
    if runtime.scraper is None:
        raise RuntimeError("the scrape session is not open yet (startup has not run)")
    urls = [(pod, scrape.pod_url(pod, port)) for pod in pods]
    targets = [(pod, url) for pod, url in urls if url is not None]
    reports = await asyncio.gather(*(scrape.fetch(runtime.scraper, url) for _, url in targets))
    answered = []
    for (pod, _), report in zip(targets, reports, strict=True):
        if report is None:
            runtime.metrics.scrape_failures.inc()
            continue
        answered.append(report)
        patch = deletion_cost.patch_for(pod, report.handlers_active) if runtime.config.deletion_cost else None
        if patch is not None:
            try:
                await kube.patch_pod(pod["metadata"]["namespace"], pod["metadata"]["name"], patch)
            except KubeError as exc:  # the pod may be going away; the next pass retries
                logger.debug("could not set deletion cost on %s: %s", pod["metadata"]["name"], exc)
    return scrape.total_backlog(answered) if answered else None


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


async def _reconcile(runtime: Runtime, body: dict[str, Any]) -> None:
    kube = runtime.client()
    # Read the Worker afresh inside the lock: the trigger's copy may predate the last status patch.
    latest = await kube.get(WORKER, body["metadata"]["namespace"], body["metadata"]["name"])
    if latest is None or latest["metadata"].get("uid") != body["metadata"].get("uid"):
        return  # deleted (or replaced by a new Worker of the same name, which has its own trigger)
    body = latest
    meta = body["metadata"]
    namespace, name = meta["namespace"], meta["name"]
    if meta.get("deletionTimestamp"):
        return  # owner references clean up; nothing to keep true any more
    found: list[problems.Problem] = []
    spec: specs.WorkerSpec | None = None
    try:
        spec = specs.parse(body, pod_monitor_labels=runtime.config.pod_monitor_labels)
    except specs.SpecError as exc:
        found.append(problems.invalid_spec(exc))
    caps = await kube.capabilities()
    if spec is not None:
        secret_problem = await _check_secret(kube, spec, runtime.config)
        if secret_problem is not None:
            found.append(secret_problem)

    deployment = await kube.get(kinds.DEPLOYMENT, namespace, name)
    changes: list[str] = []
    # All or nothing: with a known problem, leave what runs alone rather than half-apply.
    if spec is not None and not found:
        deployment, changes, apply_problems = await _apply_all(kube, body, spec, caps, deployment, runtime)
        found.extend(apply_problems)

    pods = await kube.list_pods(namespace, labels.selector_string(name))
    port = spec.metrics_port if spec else rules.DEFAULT_METRICS_PORT
    backlog = await _scrape(runtime, pods, port)

    observed = conditions.observe(body, spec=spec, capabilities=caps, problems=found, deployment=deployment,
                                  pods=pods, backlog=backlog, now=_now())
    previous = body.get("status") or {}
    status = conditions.status(observed)
    patch = conditions.status_patch(previous, status)
    if patch is not None:
        await kube.patch_status(WORKER, namespace, name, patch)
    await _report(runtime, body, conditions.events(previous, status, changes),
                  degraded=conditions.degraded(status) is not None)


async def _report(runtime: Runtime, body: Mapping[str, Any], events: list[conditions.Event], *,
                  degraded: bool) -> None:
    """Post ``events`` and keep the count of degraded Workers current."""
    key = (body["metadata"]["namespace"], body["metadata"]["name"])
    if degraded:
        runtime.degraded.add(key)
    else:
        runtime.degraded.discard(key)
    runtime.metrics.degraded.set(len(runtime.degraded))
    for event in events:
        log = logger.warning if event.type == "Warning" else logger.info
        log("Worker %s/%s: %s: %s", *key, event.reason, event.message)
        try:
            await runtime.client().post_event(body, type_=event.type, reason=event.reason, message=event.message,
                                              instance=runtime.config.identity)
        except (KubeError, OSError) as exc:  # an Event is a courtesy; the status already says it
            logger.debug("could not post event: %s", exc)
