"""The operator's own permissions, as data: its RBAC rules and the admission policy that narrows
what it may change on pods.

Data only. generate.py writes the rule groups into the chart (``files/rbac-rules.yaml``) and the
policy's checks into ``files/pod-patch-policy.yaml``; the chart's templates compose them, and
the raw manifests in ``operator/manifests/`` are the chart rendered with its defaults, so the
chart and the manifests share one set of facts. tests/k8s holds the rules against every API
call the operator makes, in both directions.
"""

from __future__ import annotations

from typing import Any, Literal

from dbworker_operator import kinds, labels

Scope = Literal["cluster", "namespaced"]

# Names and namespace of the install without Helm (the chart rendered as release NAME in NAMESPACE).
NAMESPACE = "dbworker-system"
NAME = "dbworker-operator"


def _rule(group: str, resources: list[str], verbs: list[str]) -> dict[str, Any]:
    return {"apiGroups": [group], "resources": resources, "verbs": verbs}


def rule_groups() -> dict[str, list[dict[str, Any]]]:
    """The operator's PolicyRules by what needs them; ``rbac_rules`` composes them.

    - ``common``: every install: the Workers, what they own, pod reads, Events, CRD discovery.
    - ``clusterPeering`` / ``namespacedPeering``: kopf's peering object of the watch scope (a
      namespaced kopf also follows namespaces, to notice watched ones appear).
    - ``deletionCost``: ``patch pods``, only to keep the pod-deletion-cost annotation current.
    - ``secrets``: ``get secrets``, granted only in chosen namespaces, to report a missing
      database Secret or key before any pod starts.
    """
    watch = ["get", "list", "watch"]  # what kopf needs for a resource it watches
    owned = ["get", "create", "patch", "delete"]  # kube.apply, and deleting what a spec stopped asking for
    worker = kinds.WORKER
    return {
        "common": [
            # kopf watches Workers and keeps its bookkeeping in their annotations (patch).
            _rule(worker.group, [worker.plural], [*watch, "patch"]),
            _rule(worker.group, [f"{worker.plural}/status"], ["patch"]),
            # Owner references with blockOwnerDeletion need `update` on the owner's finalizers where
            # the OwnerReferencesPermissionEnforcement admission plugin runs; no request uses it.
            _rule(worker.group, [f"{worker.plural}/finalizers"], ["update"]),
            # The workers' Deployment is collected with the Worker; the console's (spec.console) is
            # deleted when the spec turns the console off.
            _rule(kinds.DEPLOYMENT.group, [kinds.DEPLOYMENT.plural], [*watch, "create", "patch", "delete"]),
            _rule(kinds.SERVICE.group, [kinds.SERVICE.plural], owned),  # the console's
            # TriggerAuthentication: KEDA's database credentials for a Worker that scales from zero.
            *(_rule(kind.group, [kind.plural], owned) for kind in (kinds.PDB, kinds.SCALED_OBJECT,
                                                                     kinds.TRIGGER_AUTHENTICATION, kinds.POD_MONITOR)),
            # Pods: listed by the Worker's selector, for their state, IPs and termination messages.
            _rule("", ["pods"], ["list"]),
            _rule("", ["events"], ["create"]),
            # kopf follows CRDs to notice the Worker CRD installed or changed.
            _rule("apiextensions.k8s.io", ["customresourcedefinitions"], ["list", "watch"]),
        ],
        "clusterPeering": [_rule("kopf.dev", ["clusterkopfpeerings"], [*watch, "patch"])],
        "namespacedPeering": [_rule("kopf.dev", ["kopfpeerings"], [*watch, "patch"]),
                              _rule("", ["namespaces"], ["list", "watch"])],
        "deletionCost": [_rule("", ["pods"], ["patch"])],
        "secrets": [_rule("", ["secrets"], ["get"])],
    }


def rbac_rules(*, scope: Scope = "cluster", deletion_cost: bool = True, secrets: bool = False) -> list[dict[str, Any]]:
    """Exactly the rules the operator needs for ``scope``: kopf's calls, handlers.py's and kube.py's.

    ``secrets`` adds ``get secrets`` (the chart grants it in Roles of chosen namespaces only).
    """
    groups = rule_groups()
    return [*groups["common"], *groups["clusterPeering" if scope == "cluster" else "namespacedPeering"],
            *(groups["deletionCost"] if deletion_cost else []), *(groups["secrets"] if secrets else [])]


def pod_patch_policy() -> dict[str, Any]:
    """The checks of a ValidatingAdmissionPolicy (admissionregistration.k8s.io/v1, Kubernetes 1.30+)
    bound to the operator's ServiceAccount: of a pod it may change one annotation, the
    pod-deletion-cost, and only to an integer. Everything else (spec, labels, finalizers, owner
    references, other annotations) must stay as it was, so `patch pods` cannot be used to
    change what a pod runs or which Service selects it.

    The chart adds the match constraints and the condition naming its ServiceAccount.
    """
    cost = labels.DELETION_COST
    new, old = "object.metadata", "oldObject.metadata"

    def lines(*parts: str) -> str:
        # One expression over several lines (CEL ignores the breaks), for people reading the policy.
        return "\n".join(parts)

    def same(field: str) -> str:
        # has() on both sides, no literals: the expressions type-check against the Pod schema as they are.
        return lines(f"has({new}.{field}) == has({old}.{field})",
                     f"&& (!has({new}.{field})", f"    || {new}.{field} == {old}.{field})")

    return {
        "validations": [
            {"expression": "object.spec == oldObject.spec",
             "message": "the dbworker operator may not change a pod's spec", "reason": "Forbidden"},
            {"expression": same("labels"),
             "message": "the dbworker operator may not change a pod's labels", "reason": "Forbidden"},
            {"expression": lines(f"({same('finalizers')})", f"&& ({same('ownerReferences')})"),
             "message": "the dbworker operator may not change a pod's finalizers or owner references",
             "reason": "Forbidden"},
            # Added or changed annotations, then removed ones: only the cost may differ.
            {"expression": lines(f"(!has({new}.annotations) || {new}.annotations.all(k,",
                                 f"  k == '{cost}'",
                                 f"  || (has({old}.annotations) && k in {old}.annotations",
                                 f"      && {old}.annotations[k] == {new}.annotations[k])))",
                                 f"&& (!has({old}.annotations) || {old}.annotations.all(k,",
                                 f"  k == '{cost}'",
                                 f"  || (has({new}.annotations) && k in {new}.annotations)))"),
             "message": f"the dbworker operator may change no pod annotation but {cost}", "reason": "Forbidden"},
            {"expression": lines(f"!has({new}.annotations)", f"|| !('{cost}' in {new}.annotations)",
                                 f"|| {new}.annotations['{cost}'].matches('^-?[0-9]+$')"),
             "message": f"{cost} must be an integer", "reason": "Invalid"},
        ],
    }
