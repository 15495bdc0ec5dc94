"""What KEDA 2.16 documents for the objects the operator emits, as data, and a strict check.

KEDA ignores a trigger metadata key it does not know, so a misspelt key is a silent no-op:
every key the operator sends must be one of these. Transcribed from
https://keda.sh/docs/2.16/reference/scaledobject-spec/, .../scalers/prometheus/,
.../scalers/postgresql/, .../scalers/mysql/ and .../concepts/authentication/ (the repository
has no KEDA CRD schema; kubernetes-validate checks what embeds core kinds: metadata, and the
HPA behavior, through an autoscaling/v2 HorizontalPodAutoscaler).
"""

from __future__ import annotations

from typing import Any

import kubernetes_validate

SCALED_OBJECT_SPEC = {"scaleTargetRef", "pollingInterval", "cooldownPeriod", "initialCooldownPeriod",
                      "idleReplicaCount", "minReplicaCount", "maxReplicaCount", "fallback", "advanced", "triggers"}
SCALE_TARGET_REF = {"apiVersion", "kind", "name", "envSourceContainerName"}
ADVANCED = {"restoreToOriginalReplicaCount", "horizontalPodAutoscalerConfig", "scalingModifiers"}
HPA_CONFIG = {"name", "behavior"}
TRIGGER = {"type", "name", "metadata", "metricType", "authenticationRef", "useCachedMetrics"}
METRIC_TYPES = {"AverageValue", "Value", "Utilization"}
AUTHENTICATION_REF = {"name", "kind"}
# Trigger metadata keys per scaler (deprecated ones left out).
METADATA = {
    "prometheus": {"serverAddress", "query", "queryParameters", "threshold", "activationThreshold", "namespace",
                   "customHeaders", "ignoreNullValues", "unsafeSsl", "timeout"},
    "postgresql": {"connectionFromEnv", "host", "port", "userName", "passwordFromEnv", "dbName", "sslmode",
                   "query", "targetQueryValue", "activationTargetQueryValue"},
    "mysql": {"connectionStringFromEnv", "host", "port", "dbName", "username", "passwordFromEnv",
              "query", "queryValue", "activationQueryValue"},
}
REQUIRED = {"prometheus": {"serverAddress", "query", "threshold"},
            "postgresql": {"query", "targetQueryValue"},
            "mysql": {"query", "queryValue"}}
# The scalers' authentication parameters (what a TriggerAuthentication may set).
AUTH_PARAMETERS = {"postgresql": {"connection", "password", "host", "port", "userName", "dbName", "sslmode"},
                   "mysql": {"connectionString", "password", "host", "port", "username", "dbName"}}
TRIGGER_AUTHENTICATION_SPEC = {"secretTargetRef", "env", "hashiCorpVault", "azureKeyVault", "podIdentity",
                               "awsSecretManager", "gcpSecretManager", "configMapTargetRef", "boundServiceAccountToken"}
SECRET_TARGET_REF = {"parameter", "name", "key"}


def _metadata_only(manifest: dict[str, Any], version: str) -> None:
    holder = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": manifest["metadata"]}
    kubernetes_validate.validate(holder, version, strict=True)


def validate(manifest: dict[str, Any], version: str, *, auths: dict[str, dict[str, Any]] | None = None) -> None:
    """Raise AssertionError for any field or key KEDA does not document; ``auths`` (name ->
    TriggerAuthentication) checks each trigger's authentication parameters too."""
    assert manifest["apiVersion"] == "keda.sh/v1alpha1"
    _metadata_only(manifest, version)
    spec = manifest["spec"]
    if manifest["kind"] == "TriggerAuthentication":
        assert set(spec) <= TRIGGER_AUTHENTICATION_SPEC, set(spec) - TRIGGER_AUTHENTICATION_SPEC
        for ref in spec.get("secretTargetRef", []):
            assert set(ref) == SECRET_TARGET_REF and all(isinstance(v, str) and v for v in ref.values()), ref
        return
    assert manifest["kind"] == "ScaledObject"
    assert set(spec) <= SCALED_OBJECT_SPEC, set(spec) - SCALED_OBJECT_SPEC
    assert set(spec["scaleTargetRef"]) <= SCALE_TARGET_REF
    assert 0 <= spec["minReplicaCount"] <= spec["maxReplicaCount"]
    advanced = spec.get("advanced", {})
    assert set(advanced) <= ADVANCED and set(advanced.get("horizontalPodAutoscalerConfig", {})) <= HPA_CONFIG
    behavior = advanced.get("horizontalPodAutoscalerConfig", {}).get("behavior")
    if behavior is not None:
        hpa = {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": "x"},
               "spec": {"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "x"},
                        "minReplicas": 1, "maxReplicas": 2, "behavior": behavior}}
        kubernetes_validate.validate(hpa, version, strict=True)
    names = [t.get("name") for t in spec["triggers"]]
    assert len(set(names)) == len(names), "trigger names must be unique"
    for trigger in spec["triggers"]:
        assert set(trigger) <= TRIGGER, set(trigger) - TRIGGER
        kind = trigger["type"]
        keys = set(trigger["metadata"])
        assert keys <= METADATA[kind], (kind, keys - METADATA[kind])
        assert REQUIRED[kind] <= keys, (kind, REQUIRED[kind] - keys)
        assert all(isinstance(v, str) for v in trigger["metadata"].values()), "KEDA metadata values are strings"
        assert trigger.get("metricType", "AverageValue") in METRIC_TYPES
        for key, value in trigger["metadata"].items():
            if key in ("threshold", "activationThreshold", "targetQueryValue", "activationTargetQueryValue",
                       "queryValue", "activationQueryValue"):
                float(value)  # KEDA parses these as floats
        ref = trigger.get("authenticationRef")
        if ref is not None:
            assert set(ref) <= AUTHENTICATION_REF
            if auths is not None:
                auth = auths[ref["name"]]
                params = {r["parameter"] for r in auth["spec"].get("secretTargetRef", [])}
                assert params <= AUTH_PARAMETERS[kind], (kind, params - AUTH_PARAMETERS[kind])
