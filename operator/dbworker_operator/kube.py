"""The only Kubernetes API calls the operator makes itself (kopf makes its own for watching).

One aiohttp session with the same credentials kopf logs in with (service account in a pod,
kubeconfig elsewhere): get, list, create, merge-patch, delete, API discovery, the server's
version, and ``apply``,
which creates an owned object or restores it when it drifted (see drift.py).
"""

from __future__ import annotations

import base64
import logging
import ssl
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import aiohttp
import kopf

from dbworker_operator import drift, kinds

MERGE_PATCH = "application/merge-patch+json"
DISCOVERY_TTL_SECONDS = 60.0
REQUEST_TIMEOUT_SECONDS = 20.0


class KubeError(Exception):
    """The API server refused or failed a request; ``message`` is its own explanation."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class NotOwned(Exception):
    """An object with the name the operator needs exists and belongs to someone else."""


Action = Literal["created", "updated", "unchanged"]


@dataclass(frozen=True)
class Applied:
    action: Action
    obj: dict[str, Any]


def object_path(api_version: str, plural: str, namespace: str | None, name: str | None = None,
                subresource: str | None = None) -> str:
    """The URL path of a collection or object, e.g. /apis/apps/v1/namespaces/ns/deployments/x."""
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    parts = [base]
    if namespace:
        parts.append(f"namespaces/{namespace}")
    parts.append(plural)
    if name:
        parts.append(name)
    if subresource:
        parts.append(subresource)
    return "/".join(parts)


def login(*, settings: kopf.OperatorSettings, logger: Any) -> kopf.ConnectionInfo:
    """The credentials both kopf and this client use: the pod's service account, else the kubeconfig.

    Raises ``kopf.LoginError`` when neither is available.
    """
    info = kopf.login_with_service_account(settings=settings, logger=logger) or \
        kopf.login_with_kubeconfig(settings=settings, logger=logger)
    if info is None:
        raise kopf.LoginError("no service account token and no kubeconfig (KUBECONFIG): cannot reach Kubernetes")
    return info


def _ssl_context(info: kopf.ConnectionInfo) -> ssl.SSLContext | bool:
    if not info.server.startswith("https"):
        return False
    if info.insecure:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    cadata = base64.b64decode(info.ca_data).decode() if info.ca_data else None
    context = ssl.create_default_context(cafile=info.ca_path or None, cadata=cadata)
    if info.certificate_path or info.certificate_data:
        # ssl wants files; kubeconfigs may carry the client certificate inline (base64).
        cert, key = info.certificate_path, info.private_key_path
        if info.certificate_data:
            cert = _temp_file(base64.b64decode(info.certificate_data))
        if info.private_key_data:
            key = _temp_file(base64.b64decode(info.private_key_data))
        context.load_cert_chain(str(cert), str(key) if key else None)
    return context


def _auth_header(info: kopf.ConnectionInfo) -> dict[str, str]:
    return {"Authorization": f"{info.scheme or 'Bearer'} {info.token}"} if info.token else {}


def _temp_file(data: bytes) -> str:
    with tempfile.NamedTemporaryFile(delete=False, prefix="dbworker-operator-") as f:
        f.write(data)
        return f.name


class Kube:
    """A small async Kubernetes client for the objects a Worker owns."""

    def __init__(self, session: aiohttp.ClientSession, server: str,
                 relogin: Callable[[], kopf.ConnectionInfo] | None = None) -> None:
        self._session = session
        self._server = server.rstrip("/")
        self._relogin = relogin
        self._discovery: dict[str, tuple[float, frozenset[str]]] = {}
        self._version: tuple[float, tuple[int, int] | None] | None = None

    @classmethod
    async def connect(cls, *, settings: kopf.OperatorSettings, logger: logging.Logger | Any) -> Kube:
        """Connect with ``login``'s credentials. Raises ``kopf.LoginError`` without any."""
        info = login(settings=settings, logger=logger)
        headers = {"Accept": "application/json", "User-Agent": "dbworker-operator", **_auth_header(info)}
        auth = aiohttp.BasicAuth(info.username, info.password or "") if info.username else None
        connector = aiohttp.TCPConnector(ssl=_ssl_context(info), limit=20)
        session = aiohttp.ClientSession(
            connector=connector, headers=headers, auth=auth,
            timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_SECONDS),
        )
        return cls(session, info.server, relogin=lambda: login(settings=settings, logger=logger))

    async def close(self) -> None:
        await self._session.close()

    async def _call(self, method: str, path: str, *, body: Any = None, params: Mapping[str, str] | None = None,
                    content_type: str = "application/json", _retried: bool = False) -> dict[str, Any] | None:
        """One API request; None for 404; ``KubeError`` for any other failure."""
        kwargs: dict[str, Any] = {"params": dict(params or {})}
        if body is not None:
            kwargs["json"] = body
            kwargs["headers"] = {"Content-Type": content_type}
        async with self._session.request(method, self._server + path, **kwargs) as response:
            if response.status == 401 and self._relogin is not None and not _retried:
                # Service account tokens rotate (the kubelet rewrites the file): read it again.
                self._session.headers.update(_auth_header(self._relogin()))
                return await self._call(method, path, body=body, params=params, content_type=content_type,
                                        _retried=True)
            if response.status == 404:
                return None
            try:
                payload = await response.json(content_type=None)
            except ValueError:
                payload = {"message": (await response.text())[:300]}
            if response.status >= 400:
                payload = payload if isinstance(payload, dict) else {}
                raise KubeError(response.status, str(payload.get("reason") or response.reason),
                                str(payload.get("message") or ""))
            return payload if isinstance(payload, dict) else {}

    async def get(self, kind: kinds.Kind, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._call("GET", object_path(kind.api_version, kind.plural, namespace, name))

    async def get_secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        return await self._call("GET", object_path("v1", "secrets", namespace, name))

    async def list_pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        result = await self._call("GET", object_path("v1", "pods", namespace), params={"labelSelector": selector})
        return list((result or {}).get("items") or [])

    async def patch_pod(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        await self._call("PATCH", object_path("v1", "pods", namespace, name), body=patch, content_type=MERGE_PATCH)

    async def list_objects(self, kind: kinds.Kind, namespace: str | None) -> list[dict[str, Any]]:
        """Every object of ``kind`` in ``namespace`` (None: all namespaces)."""
        result = await self._call("GET", object_path(kind.api_version, kind.plural, namespace))
        items = list((result or {}).get("items") or [])
        for item in items:  # lists omit each item's apiVersion/kind; owner references need them
            item.setdefault("apiVersion", kind.api_version)
            item.setdefault("kind", kind.kind)
        return items

    async def patch_status(self, kind: kinds.Kind, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        path = object_path(kind.api_version, kind.plural, namespace, name, "status")
        await self._call("PATCH", path, body={"status": dict(status)}, content_type=MERGE_PATCH)

    async def get_peering(self, name: str, namespace: str | None) -> dict[str, Any] | None:
        """kopf's peering object (cluster-wide when ``namespace`` is None)."""
        plural = "kopfpeerings" if namespace else "clusterkopfpeerings"
        return await self._call("GET", object_path("kopf.dev/v1", plural, namespace, name))

    async def post_event(self, involved: Mapping[str, Any], *, type_: str, reason: str, message: str,
                         instance: str) -> None:
        """A core/v1 Event about ``involved`` (a Worker), as `kubectl describe` shows them."""
        meta = involved["metadata"]
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        event = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"apiVersion": involved.get("apiVersion"), "kind": involved.get("kind"),
                               "name": meta["name"], "namespace": meta["namespace"], "uid": meta.get("uid")},
            "type": type_, "reason": reason, "message": message[:1024],
            "source": {"component": "dbworker-operator"},
            "reportingComponent": "dbworker.dev/operator", "reportingInstance": instance[:128],
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        }
        await self._call("POST", object_path("v1", "events", meta["namespace"]), body=event)

    async def delete(self, kind: kinds.Kind, namespace: str, name: str) -> bool:
        """Delete an object; False when it was already gone."""
        path = object_path(kind.api_version, kind.plural, namespace, name)
        return await self._call("DELETE", path, body={"propagationPolicy": "Background"}) is not None

    async def serves(self, kind: kinds.Kind) -> bool:
        """Whether the cluster serves ``kind`` (API discovery, cached for a minute)."""
        now = time.monotonic()
        cached = self._discovery.get(kind.api_version)
        if cached is None or now - cached[0] > DISCOVERY_TTL_SECONDS:
            path = f"/apis/{kind.api_version}" if "/" in kind.api_version else f"/api/{kind.api_version}"
            try:
                result = await self._call("GET", path)
            except KubeError:
                result = None
            plurals = frozenset(str(r.get("name")) for r in (result or {}).get("resources") or [])
            cached = (now, plurals)
            self._discovery[kind.api_version] = cached
        return kind.plural in cached[1]

    async def server_version(self) -> tuple[int, int] | None:
        """The API server's (major, minor) from /version (cached for a minute), None if unreadable.

        /version is readable by every authenticated client (the default system:public-info-viewer
        role), so it needs no rule of the operator's own.
        """
        now = time.monotonic()
        if self._version is None or now - self._version[0] > DISCOVERY_TTL_SECONDS:
            try:
                version = kinds.parse_server_version(await self._call("GET", "/version"))
            except KubeError:
                version = None
            self._version = (now, version)
        return self._version[1]

    async def capabilities(self) -> kinds.Capabilities:
        """What the cluster serves, from discovery and /version (both cached for a minute)."""
        return kinds.Capabilities(keda=await self.serves(kinds.SCALED_OBJECT),
                                  pod_monitors=await self.serves(kinds.POD_MONITOR),
                                  server_version=await self.server_version())

    async def apply(self, kind: kinds.Kind, manifest: Mapping[str, Any], *, owner_uid: str,
                    on_create: Mapping[str, Any] | None = None) -> Applied:
        """Create ``manifest`` (plus ``on_create`` fields) or restore the fields it sets;
        never touches objects others own.

        Raises ``NotOwned`` for a same-named object without our owner reference and
        ``KubeError`` when the API server rejects the object.
        """
        meta = manifest["metadata"]
        wanted = drift.annotate(manifest)
        actual = await self.get(kind, meta["namespace"], meta["name"])
        if actual is None:
            body = drift.merged(wanted, on_create or {})
            created = await self._call("POST", object_path(kind.api_version, kind.plural, meta["namespace"]),
                                       body=body)
            return Applied("created", created or {})
        if not drift.owned_by(actual, owner_uid):
            raise NotOwned(f"a {kind.kind} named {meta['name']!r} already exists and is not owned by this "
                           f"Worker: delete or rename it, or rename the Worker")
        patch = drift.restore_patch(actual, wanted)
        if patch is None:
            return Applied("unchanged", actual)
        path = object_path(kind.api_version, kind.plural, meta["namespace"], meta["name"])
        updated = await self._call("PATCH", path, body=patch, content_type=MERGE_PATCH) or {}
        # The server may normalise what we send (quantities like 0.5 -> 500m) so ``contains``
        # never holds; it then changes nothing and keeps the version: that is not an update.
        before = actual["metadata"].get("resourceVersion")
        if before and before == (updated.get("metadata") or {}).get("resourceVersion"):
            return Applied("unchanged", updated)
        return Applied("updated", updated)
