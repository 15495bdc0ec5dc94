"""kmock's Kubernetes emulator, extended with what kopf and the operator need from a cluster.

The stock ``kmock.KubernetesEmulator`` stores objects but lacks server-set ``uid`` and rising
``resourceVersion``, watches that resume from a ``resourceVersion`` without losing events,
``generation``, the status and scale subresources, merge/JSON patches with deletions, label
selectors, ``generateName``, garbage collection through owner references, and a /version of
a chosen Kubernetes release (kmock's is fixed). ``Cluster``
adds them, keeping kmock's server, request parsing and API discovery; ``EmulatorThread``
serves it over HTTP from a background thread so a real operator process can talk to it.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import json
import secrets
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import kmock
from kmock._internal import apps as kmock_apps  # the base class whose dispatch we keep

RKey = tuple[str, str, str]  # group, version, plural
OKey = tuple[str, str, str, str, str]  # group, version, plural, namespace ("" if cluster), name

# (group, version, plural) -> (kind, namespaced, subresources)
RESOURCES: dict[RKey, tuple[str, bool, tuple[str, ...]]] = {
    ("", "v1", "pods"): ("Pod", True, ("status",)),
    ("", "v1", "secrets"): ("Secret", True, ()),
    ("", "v1", "events"): ("Event", True, ()),
    ("", "v1", "services"): ("Service", True, ("status",)),
    ("", "v1", "namespaces"): ("Namespace", False, ("status",)),
    ("apps", "v1", "deployments"): ("Deployment", True, ("status", "scale")),
    ("policy", "v1", "poddisruptionbudgets"): ("PodDisruptionBudget", True, ("status",)),
    ("apiextensions.k8s.io", "v1", "customresourcedefinitions"): ("CustomResourceDefinition", False, ("status",)),
    ("kopf.dev", "v1", "clusterkopfpeerings"): ("ClusterKopfPeering", False, ()),
    ("kopf.dev", "v1", "kopfpeerings"): ("KopfPeering", True, ()),
    ("dbworker.dev", "v1alpha1", "workers"): ("Worker", True, ("status", "scale")),
}
OPTIONAL: dict[str, dict[RKey, tuple[str, bool, tuple[str, ...]]]] = {
    "keda": {("keda.sh", "v1alpha1", "scaledobjects"): ("ScaledObject", True, ("status",)),
             ("keda.sh", "v1alpha1", "triggerauthentications"): ("TriggerAuthentication", True, ())},
    "prometheus-operator": {("monitoring.coreos.com", "v1", "podmonitors"): ("PodMonitor", True, ())},
}
TEST_TOKEN = "emulator-test-token"
VERBS = ["create", "delete", "get", "list", "patch", "update", "watch"]


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: dicts merge, None deletes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def json_patch(target: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902 JSON patch: add, replace, remove, test (what kopf and kubectl send)."""
    doc = copy.deepcopy(target)
    for op in ops:
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        parent: Any = doc
        for part in parts[:-1]:
            parent = parent[int(part)] if isinstance(parent, list) else parent.setdefault(part, {})
        last = parts[-1] if parts else ""
        if op["op"] in ("add", "replace"):
            if isinstance(parent, list):
                index = len(parent) if last == "-" else int(last)
                if op["op"] == "add":
                    parent.insert(index, op["value"])
                else:
                    parent[index] = op["value"]
            else:
                parent[last] = op["value"]
        elif op["op"] == "remove":
            if isinstance(parent, list):
                del parent[int(last)]
            else:
                parent.pop(last, None)
        elif op["op"] == "test":
            value = parent[int(last)] if isinstance(parent, list) else parent.get(last)
            if value != op.get("value"):
                raise ValueError(f"JSON patch test failed at {op['path']}")
    return doc


def matches_selector(labels: Mapping[str, str], selector: str) -> bool:
    """Equality-based label selectors: ``a=b``, ``a==b``, ``a!=b``, ``a``, ``!a``."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key.strip()) != value.strip():
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


@attrs.define(kw_only=True)
class Cluster(kmock.KubernetesEmulator):
    """An in-memory Kubernetes API good enough for kopf and the operator (see module doc)."""

    addons: tuple[str, ...] = ()
    # Admission: resource -> function returning what is wrong with an object ([] = admit).
    validators: dict[RKey, Callable[[dict[str, Any]], list[str]]] = attrs.field(factory=dict)
    enforce: bool = True
    # When set, every request must carry ``Authorization: Bearer <token>`` (else 401), so
    # tests can rotate a token as the kubelet rotates service account tokens.
    token: str | None = None
    # What /version reports (major, minor), for the operator's version-gated fields.
    version: tuple[str, str] = ("1", "31")
    _store: dict[OKey, dict[str, Any]] = attrs.field(factory=dict, init=False)
    _kinds: dict[RKey, tuple[str, bool, tuple[str, ...]]] = attrs.field(factory=dict, init=False)
    _history: list[tuple[int, RKey, dict[str, Any]]] = attrs.field(factory=list, init=False)
    _rv: int = attrs.field(default=100, init=False)
    _changed: asyncio.Event | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        super().__attrs_post_init__()
        self._kinds.update(RESOURCES)
        for addon in self.addons:
            self._kinds.update(OPTIONAL[addon])
        for (group, version, plural), (kind, namespaced, subresources) in self._kinds.items():
            self.resources[kmock.resource(group, version, plural)] = kmock.ResourceInfo(
                kind=kind, namespaced=namespaced, singular=kind.lower(), verbs=VERBS, subresources=subresources)

    async def _serve_server_version(self, request: Any) -> Any:
        major, minor = self.version
        return {"major": major, "minor": minor, "gitVersion": f"v{major}.{minor.rstrip('+')}.0",
                "platform": "linux/amd64"}

    # ---- storage -------------------------------------------------------------------------

    def _emit(self, rkey: RKey, type_: str, obj: Mapping[str, Any]) -> None:
        self._history.append((self._rv, rkey, {"type": type_, "object": copy.deepcopy(dict(obj))}))
        if self._changed is not None:
            self._changed.set()
        self._changed = asyncio.Event()

    def _bump(self, obj: dict[str, Any]) -> None:
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)

    def _create(self, rkey: RKey, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
        kind, namespaced, _ = self._kinds[rkey]
        obj = copy.deepcopy(dict(body))
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + secrets.token_hex(3)
        if not meta.get("name"):
            raise kmock.KubernetesError(422, "Invalid", "metadata.name: Required value")
        meta["namespace"] = namespace if namespaced else None
        if not namespaced:
            meta.pop("namespace")
        key = (*rkey, namespace if namespaced else "", meta["name"])
        self._admit(rkey, obj)
        if namespaced and ("", "v1", "namespaces", "", namespace) not in self._store:
            # Namespaces come into being with their first object (a real cluster needs them first).
            self._create(("", "v1", "namespaces"), "", {"metadata": {"name": namespace}})
        if key in self._store:
            raise kmock.KubernetesError(409, "AlreadyExists", f"{rkey[2]} {meta['name']!r} already exists")
        group, version, _ = rkey
        obj["apiVersion"] = f"{group}/{version}" if group else version
        obj["kind"] = kind
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
        self._bump(obj)
        self._store[key] = obj
        self._emit(rkey, "ADDED", obj)
        refs = meta.get("ownerReferences") or []
        if refs and not any(self._exists(ref.get("uid")) for ref in refs):
            # Garbage collection, as in a cluster: an object whose every owner is gone (created by
            # a reconcile that read its owner just before the owner's deletion) is collected.
            self._delete(key)
        return obj

    def _exists(self, uid: str | None) -> bool:
        return any(other["metadata"].get("uid") == uid for other in self._store.values())

    def _update(self, key: OKey, new: dict[str, Any], *, subresource: str | None) -> dict[str, Any]:
        rkey = key[:3]
        old = self._store[key]
        _, _, subresources = self._kinds[rkey]
        if subresource == "status":
            new = {**old, "status": new.get("status", {})}
        elif "status" in subresources:
            # Writes to the main resource never change a status the subresource owns.
            new = {k: v for k, v in new.items() if k != "status"}
            if "status" in old:
                new["status"] = old["status"]
        meta = new.setdefault("metadata", {})
        for fixed in ("uid", "creationTimestamp", "name", "namespace", "generation", "resourceVersion"):
            if fixed in old["metadata"]:
                meta[fixed] = old["metadata"][fixed]
        if subresource != "status":
            self._admit(rkey, new, old)
        if new == old:
            return old  # a no-op write changes nothing and notifies nobody, as in Kubernetes
        if new.get("spec") != old.get("spec"):
            meta["generation"] = int(old["metadata"].get("generation") or 1) + 1
        self._bump(new)
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            return self._remove(key, new)
        self._store[key] = new
        self._emit(rkey, "MODIFIED", new)
        return new

    def _admit(self, rkey: RKey, obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
        validator = self.validators.get(rkey)
        problems = validator(obj) if validator is not None and self.enforce else []
        if old is not None and problems:
            # Validation ratcheting (Kubernetes 1.30+): what was already invalid may stay so.
            problems = [p for p in problems if p not in validator(old)]  # type: ignore[misc]
        if problems:
            raise kmock.KubernetesError(422, "Invalid", "; ".join(problems))

    def _remove(self, key: OKey, obj: dict[str, Any]) -> dict[str, Any]:
        self._store.pop(key, None)
        self._emit(key[:3], "DELETED", obj)
        # Garbage collection: whatever this owned goes too (background propagation).
        uid = obj["metadata"].get("uid")
        for other_key, other in list(self._store.items()):
            refs = other["metadata"].get("ownerReferences") or []
            if other_key in self._store and any(ref.get("uid") == uid for ref in refs):
                self._delete(other_key)
        return obj

    def _delete(self, key: OKey) -> dict[str, Any]:
        obj = self._store[key]
        if obj["metadata"].get("finalizers"):
            if not obj["metadata"].get("deletionTimestamp"):
                new = copy.deepcopy(obj)
                new["metadata"]["deletionTimestamp"] = _now()
                self._bump(new)
                self._store[key] = new
                self._emit(key[:3], "MODIFIED", new)
                return new
            return obj
        obj = copy.deepcopy(obj)
        self._bump(obj)
        return self._remove(key, obj)

    # ---- direct access for tests (call from the server's loop or when it is idle) ------------

    def objects_of(self, rkey: RKey) -> list[dict[str, Any]]:
        return [copy.deepcopy(obj) for key, obj in self._store.items() if key[:3] == rkey]

    # ---- HTTP ----------------------------------------------------------------------------

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        # kmock's path parser reads "/api/v1/namespaces" as a namespace prefix and fails:
        # build the request for the namespaces collection here instead.
        if raw_request.path.rstrip("/") == "/api/v1/namespaces":
            body = await raw_request.read()
            request = kmock.Request(
                raw_request=raw_request, url=raw_request.url, method=raw_request.method,
                params=dict(raw_request.query), headers=dict(raw_request.headers),
                data=json.loads(body) if body else None, body=body,
                resource=kmock.resource("", "v1", "namespaces"),
            )
            self._requests.append(request)  # recorded like every other request (RBAC audit)
            return await self._handle(request)
        return await super().__call__(raw_request)

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        if self.token is not None:
            sent = {k.lower(): v for k, v in (request.headers or {}).items()}.get("authorization")
            if sent != f"Bearer {self.token}":
                return self._status(401, "Unauthorized", "Unauthorized")
        res = request.resource
        if res is not None and res.plural and res.group is not None and res.version is not None:
            rkey = (res.group, res.version, res.plural)
            if rkey not in self._kinds:
                return self._status(404, "NotFound", f"the server could not find the requested resource {rkey}")
            try:
                return await self._serve(request, rkey)
            except kmock.KubernetesError as exc:
                return self._status(exc.status, exc.reason or "Error", exc.message or "")
            except (ValueError, KeyError, TypeError, IndexError) as exc:
                return self._status(422, "Invalid", f"{type(exc).__name__}: {exc}")
        # Discovery (/api, /apis, /apis/<group>/<version>, /version) stays kmock's.
        return await kmock_apps.RawHandler._handle(self, request)

    @staticmethod
    def _status(code: int, reason: str, message: str) -> aiohttp.web.Response:
        return aiohttp.web.json_response({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
                                          "code": code, "reason": reason, "message": message}, status=code)

    async def _serve(self, request: kmock.Request, rkey: RKey) -> aiohttp.web.StreamResponse:
        method = str(request.method.value if request.method else "GET").upper()
        params = dict(request.params or {})
        namespace = request.namespace or ""
        name = request.name
        sub = request.subresource
        if method == "GET" and params.get("watch") in ("true", "1"):
            return await self._watch(request, rkey, namespace or None, params)
        async with self._lock:
            if method == "GET" and name is None:
                return aiohttp.web.json_response(self._list(rkey, namespace or None, params))
            if method == "POST" and name is None:
                return aiohttp.web.json_response(self._create(rkey, namespace, request.data or {}), status=201)
            if name is None:
                return self._status(405, "MethodNotAllowed", f"{method} needs an object name")
            key = (*rkey, namespace if self._kinds[rkey][1] else "", name)
            if key not in self._store:
                return self._status(404, "NotFound", f'{rkey[2]} "{name}" not found')
            obj = self._store[key]
            if method == "GET":
                return aiohttp.web.json_response(self._scale(obj) if sub == "scale" else obj)
            if method == "DELETE":
                return aiohttp.web.json_response(self._delete(key))
            if method in ("PATCH", "PUT"):
                data = request.data
                if sub == "scale":
                    replicas = (data or {}).get("spec", {}).get("replicas")
                    new = merge_patch(obj, {"spec": {"replicas": replicas}})
                    return aiohttp.web.json_response(self._scale(self._update(key, new, subresource=None)))
                content_type = str(request.headers.get("Content-Type", ""))
                if method == "PUT":
                    new = copy.deepcopy(data)
                elif "json-patch" in content_type:
                    new = json_patch(obj, data)
                else:  # merge-patch (strategic merge is treated as merge: good enough here)
                    new = merge_patch(obj, data)
                return aiohttp.web.json_response(self._update(key, new, subresource=sub))
        return self._status(405, "MethodNotAllowed", method)

    def _scale(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        return {"apiVersion": "autoscaling/v1", "kind": "Scale",
                "metadata": {"name": obj["metadata"]["name"], "namespace": obj["metadata"].get("namespace")},
                "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 0)},
                "status": {"replicas": (obj.get("status") or {}).get("replicas", 0),
                           "selector": (obj.get("status") or {}).get("selector", "")}}

    def _visible(self, obj: Mapping[str, Any], namespace: str | None, params: Mapping[str, str]) -> bool:
        meta = obj.get("metadata") or {}
        if namespace is not None and meta.get("namespace") != namespace:
            return False
        return matches_selector(meta.get("labels") or {}, params.get("labelSelector", ""))

    def _list(self, rkey: RKey, namespace: str | None, params: Mapping[str, str]) -> dict[str, Any]:
        items = [obj for key, obj in self._store.items()
                 if key[:3] == rkey and self._visible(obj, namespace, params)]
        kind = self._kinds[rkey][0]
        return {"apiVersion": "v1", "kind": f"{kind}List", "metadata": {"resourceVersion": str(self._rv)},
                "items": items}

    async def _watch(self, request: kmock.Request, rkey: RKey, namespace: str | None,
                     params: Mapping[str, str]) -> aiohttp.web.StreamResponse:
        assert request._raw_request is not None  # set for every request that came over HTTP
        loop = asyncio.get_running_loop()
        deadline = loop.time() + float(params["timeoutSeconds"]) if params.get("timeoutSeconds") else None
        response = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request._raw_request)
        async with self._lock:
            since = params.get("resourceVersion", "")
            if since.isdigit() and int(since) > 0:
                backlog: list[dict[str, Any]] = []
                position = next((i for i, (rv, _, _) in enumerate(self._history) if rv > int(since)),
                                len(self._history))
            else:  # no version: the current objects first, as a real API server does
                backlog = [{"type": "ADDED", "object": copy.deepcopy(obj)} for key, obj in self._store.items()
                           if key[:3] == rkey and self._visible(obj, namespace, params)]
                position = len(self._history)
        try:
            for event in backlog:
                await response.write(json.dumps(event).encode() + b"\n")
            while True:
                while position < len(self._history):
                    _, event_rkey, event = self._history[position]
                    position += 1
                    if event_rkey == rkey and self._visible(event["object"], namespace, params):
                        await response.write(json.dumps(event).encode() + b"\n")
                if self._changed is None:
                    self._changed = asyncio.Event()
                waiter = self._changed
                timeout = None if deadline is None else deadline - loop.time()
                if timeout is not None and timeout <= 0:
                    break
                try:
                    await asyncio.wait_for(waiter.wait(), timeout)
                except TimeoutError:
                    break
            await response.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the client went away (kopf restarting its watch, or shutting down)
        return response


class EmulatorThread:
    """Serves a ``Cluster`` over HTTP from a background thread, for a real operator process."""

    def __init__(self, *, addons: tuple[str, ...] = (),
                 validators: Mapping[RKey, Callable[[dict[str, Any]], list[str]]] | None = None,
                 version: tuple[str, str] = ("1", "31")) -> None:
        self._addons = addons
        self._version = version
        self._validators = dict(validators or {})
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self.cluster: Cluster | None = None
        self.url = ""
        self._thread = threading.Thread(target=self._run, name="k8s-emulator", daemon=True)
        self._error: BaseException | None = None

    def _run(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as exc:  # reported to the test by start()
            self._error = exc
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        async with Cluster(addons=self._addons, validators=self._validators, version=self._version) as cluster, kmock.Server(cluster) as server:
            self.cluster = cluster
            self.url = str(server.url).rstrip("/")
            self._ready.set()
            await self._stop.wait()

    def start(self) -> EmulatorThread:
        self._thread.start()
        self._ready.wait(30)
        if self._error is not None or not self.url:
            raise RuntimeError(f"the Kubernetes emulator did not start: {self._error!r}")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(15)

    def call(self, fn: Any, *args: Any) -> Any:
        """Run ``fn(*args)`` on the server's loop (the only safe place to touch its state)."""
        assert self._loop is not None
        async def _call() -> Any:
            return fn(*args)
        return asyncio.run_coroutine_threadsafe(_call(), self._loop).result(10)

    def kubeconfig(self, path: Path, *, token: str = "") -> Path:
        """A kubeconfig for this emulator (rewrite it with a new ``token`` to rotate credentials)."""
        token = token or TEST_TOKEN
        path.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": "emulator",
            "clusters": [{"name": "emulator", "cluster": {"server": self.url}}],
            # A token the emulator ignores; tests check it never leaves for anywhere but the API.
            "users": [{"name": "tester", "user": {"token": token}}],
            "contexts": [{"name": "emulator", "context": {"cluster": "emulator", "user": "tester"}}],
        }))
        return path


@contextmanager
def running(*, addons: tuple[str, ...] = (),
            validators: Mapping[RKey, Callable[[dict[str, Any]], list[str]]] | None = None,
            version: tuple[str, str] = ("1", "31")) -> Iterator[EmulatorThread]:
    emulator = EmulatorThread(addons=addons, validators=validators, version=version).start()
    try:
        yield emulator
    finally:
        emulator.stop()
