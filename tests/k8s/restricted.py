"""The `restricted` Pod Security Standard (latest), as the API server's admission checks a pod spec.

One checker for the operator's worker pods, the chart's operator pod and the example's pods:
``violations(pod_spec)`` lists what `pod-security.kubernetes.io/enforce: restricted` would
refuse, naming the container and field, ([] = admitted). It covers the baseline rules a pod spec
alone decides and every restricted rule (kubernetes.io/docs/concepts/security/pod-security-standards).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                      "projected", "secret"}
ALLOWED_SECCOMP = {"RuntimeDefault", "Localhost"}
ALLOWED_ADDED_CAPABILITIES = {"NET_BIND_SERVICE"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}


def _containers(pod: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from pod.get(key) or []


def violations(pod: Mapping[str, Any]) -> list[str]:
    """What the restricted profile refuses in ``pod`` (a pod's ``spec``)."""
    found: list[str] = []
    pod_ctx = pod.get("securityContext") or {}
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            found.append(f"spec.{field} is true")
    for volume in pod.get("volumes") or []:
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            found.append(f"volume {volume.get('name')}: {sorted(kinds - RESTRICTED_VOLUMES)} not allowed")
    for sysctl in pod_ctx.get("sysctls") or []:
        if sysctl.get("name") not in SAFE_SYSCTLS:
            found.append(f"sysctl {sysctl.get('name')} not allowed")
    if pod_ctx.get("runAsUser") == 0:
        found.append("spec.securityContext.runAsUser is 0")
    pod_seccomp = (pod_ctx.get("seccompProfile") or {}).get("type")
    if pod_seccomp is not None and pod_seccomp not in ALLOWED_SECCOMP:
        found.append(f"spec.securityContext.seccompProfile.type is {pod_seccomp}")
    for container in _containers(pod):
        where = f"container {container.get('name')}"
        ctx = container.get("securityContext") or {}
        if ctx.get("privileged"):
            found.append(f"{where}: privileged")
        if (ctx.get("windowsOptions") or {}).get("hostProcess"):
            found.append(f"{where}: hostProcess")
        if ctx.get("procMount") not in (None, "Default"):
            found.append(f"{where}: procMount {ctx['procMount']}")
        if any(port.get("hostPort") for port in container.get("ports") or []):
            found.append(f"{where}: hostPort")
        if ctx.get("allowPrivilegeEscalation") is not False:
            found.append(f"{where}: allowPrivilegeEscalation must be false")
        non_root = ctx.get("runAsNonRoot", pod_ctx.get("runAsNonRoot"))
        if non_root is not True:
            found.append(f"{where}: runAsNonRoot must be true (pod or container)")
        if ctx.get("runAsUser") == 0:
            found.append(f"{where}: runAsUser is 0")
        seccomp = (ctx.get("seccompProfile") or {}).get("type") or pod_seccomp
        if seccomp not in ALLOWED_SECCOMP:
            found.append(f"{where}: seccompProfile must be RuntimeDefault or Localhost (pod or container)")
        capabilities = ctx.get("capabilities") or {}
        if "ALL" not in (capabilities.get("drop") or []):
            found.append(f"{where}: capabilities must drop ALL")
        added = set(capabilities.get("add") or []) - ALLOWED_ADDED_CAPABILITIES
        if added:
            found.append(f"{where}: capabilities {sorted(added)} added")
    return found


def pod_specs(manifests: Iterable[Mapping[str, Any]]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(kind/name, pod spec) of every pod and pod template among ``manifests``."""
    for obj in manifests:
        name = f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"
        if obj.get("kind") == "Pod":
            yield name, dict(obj.get("spec") or {})
        template = ((obj.get("spec") or {}).get("template") or {}).get("spec")
        if template is not None:
            yield name, dict(template)
