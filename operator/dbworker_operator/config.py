"""The operator's settings from its DBWORKER_OPERATOR_* environment variables.

Read once at start into a frozen ``OperatorConfig``; a bad value fails with one line naming
the variable and the fix, before the operator touches the cluster.
"""

from __future__ import annotations

import os
import random
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field

from dbworker_operator import fields


class ConfigError(ValueError):
    """A DBWORKER_OPERATOR_* variable the operator cannot use; the message names it."""


@dataclass(frozen=True)
class OperatorConfig:
    namespaces: tuple[str, ...] = ()  # empty: cluster-wide
    liveness_port: int = 8080
    metrics_port: int = 9090
    peering: str = "dbworker-operator"
    priority: int = 0
    standalone: bool = False
    log_level: str = "INFO"
    resync_seconds: float = 30.0
    identity: str = ""
    # Where the operator may `get` Secrets to check a Worker's database Secret and key before
    # any pod starts: () never ("*" everywhere). Elsewhere the pods report the same problems.
    secret_namespaces: tuple[str, ...] = ()
    # Labels of every PodMonitor it creates (a Worker's metrics.podMonitorLabels add to them).
    pod_monitor_labels: Mapping[str, str] = field(default_factory=dict)
    # Keep each worker pod's pod-deletion-cost annotation current (needs `patch pods`).
    deletion_cost: bool = True

    def may_read_secrets(self, namespace: str) -> bool:
        return "*" in self.secret_namespaces or namespace in self.secret_namespaces

    @property
    def clusterwide(self) -> bool:
        return not self.namespaces


def _int(env: Mapping[str, str], name: str, default: int, *, low: int, high: int) -> int:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not an integer; set it to a number from {low} to {high}") from None
    if not low <= value <= high:
        raise ConfigError(f"{name}={value} is out of range; set it to a number from {low} to {high}")
    return value


def _bool(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if raw not in ("", "0", "1", "true", "false", "yes", "no"):
        raise ConfigError(f"{name}={raw!r}; use true or false")
    return default if not raw else raw in ("1", "true", "yes")


def _names(env: Mapping[str, str], name: str) -> tuple[str, ...]:
    return tuple(item.strip() for item in env.get(name, "").split(",") if item.strip())


def _label_pairs(env: Mapping[str, str], name: str) -> dict[str, str]:
    """``k=v,k2=v2`` (label values hold neither ``,`` nor ``=``) -> a dict of valid labels."""
    labels: dict[str, str] = {}
    for pair in _names(env, name):
        key, sep, value = pair.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not fields.valid_label_key(key) or not fields.valid_label_value(value):
            raise ConfigError(f"{name}: {pair!r} is not a label; write key=value pairs separated by commas, "
                              "e.g. release=kube-prometheus-stack")
        labels[key] = value
    return labels


def from_env(env: Mapping[str, str] | None = None) -> OperatorConfig:
    """Parse the operator's environment. Raises ``ConfigError`` naming the bad variable."""
    env = os.environ if env is None else env
    namespaces = _names(env, "DBWORKER_OPERATOR_NAMESPACES")
    level = env.get("DBWORKER_OPERATOR_LOG_LEVEL", "INFO").strip().upper() or "INFO"
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise ConfigError(f"DBWORKER_OPERATOR_LOG_LEVEL={level!r}; use DEBUG, INFO, WARNING or ERROR")
    standalone = _bool(env, "DBWORKER_OPERATOR_STANDALONE", False)
    raw_resync = env.get("DBWORKER_OPERATOR_RESYNC_SECONDS", "").strip()
    try:
        resync = float(raw_resync) if raw_resync else 30.0
    except ValueError:
        raise ConfigError(f"DBWORKER_OPERATOR_RESYNC_SECONDS={raw_resync!r} is not a number of seconds") from None
    if resync <= 0:
        raise ConfigError("DBWORKER_OPERATOR_RESYNC_SECONDS must be > 0")
    # Random by default: two replicas with equal priorities would both pause (kopf's rule).
    priority = _int(env, "DBWORKER_OPERATOR_PRIORITY", random.randint(1, 10_000), low=-(2**31), high=2**31 - 1)
    pod = env.get("POD_NAME") or env.get("HOSTNAME") or socket.gethostname()
    return OperatorConfig(
        namespaces=namespaces,
        liveness_port=_int(env, "DBWORKER_OPERATOR_LIVENESS_PORT", 8080, low=1, high=65535),
        metrics_port=_int(env, "DBWORKER_OPERATOR_METRICS_PORT", 9090, low=0, high=65535),
        peering=env.get("DBWORKER_OPERATOR_PEERING", "").strip() or "dbworker-operator",
        priority=priority,
        standalone=standalone,
        log_level=level,
        resync_seconds=resync,
        identity=f"{pod}/{os.getpid()}/{random.randrange(16**6):06x}",
        secret_namespaces=_names(env, "DBWORKER_OPERATOR_SECRET_NAMESPACES"),
        pod_monitor_labels=_label_pairs(env, "DBWORKER_OPERATOR_POD_MONITOR_LABELS"),
        deletion_cost=_bool(env, "DBWORKER_OPERATOR_DELETION_COST", True),
    )
