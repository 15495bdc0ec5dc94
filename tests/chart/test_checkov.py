"""checkov, the scanner a cluster administrator runs before installing, over everything we ship.

The chart rendered with its defaults and with every option on, the operator's raw manifests,
the Worker objects' Deployment/PDB/ScaledObject/PodMonitor as the builders make them, the
example's deploy/ and both Dockerfiles. Every finding must be one of ACCEPTED: a deliberate
choice, with its reason (docs/security.md repeats them for reviewers). An accepted finding that
no longer occurs fails too, so the list never outlives its reasons.

checkov lives in its own environment (`make test` installs it into .venv/tools/checkov: its
pinned dependencies conflict with pytest's), and runs with --skip-download: no network.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from tests.chart.conftest import ALL_ON, CHART, NAMESPACE, RELEASE, REPO

TOOL = REPO / ".venv" / "tools" / "checkov" / "bin" / "checkov"
CHECKOV = str(TOOL) if TOOL.exists() else shutil.which("checkov")
pytestmark = pytest.mark.skipif(CHECKOV is None, reason="checkov not installed (make test installs it)")

# (check, resources it may fail for (regex), why that is deliberate)
ACCEPTED: list[tuple[str, str, str]] = [
    ("CKV_K8S_11", r"^Deployment\.|^Pod\..*-test-healthz$",
     "no CPU limits: requests are set, and CFS throttling of a limit stalls lease renewals and probes"),
    ("CKV_K8S_15", r"^Deployment\.|^Pod\..*-test-healthz$",
     "imagePullPolicy IfNotPresent: images are named by immutable tag or digest; Always is a values/spec choice"),
    ("CKV_K8S_43", r"^Deployment\.|^Pod\..*-test-healthz$",
     "images by digest are the installer's choice (image.digest, spec.image): the project cannot know "
     "the digest of an image you build; the Dockerfiles pin their base by digest"),
    ("CKV_K8S_35", r"^Deployment\.(apps\.imgdedup(-min)?(-console)?|imagededup\.imagededup-api)$",
     "the database URL reaches the application as an environment variable from a secretKeyRef: the "
     "dbworker command and the example read DATABASE_URL (the console's token too: DBWORKER_CONSOLE_TOKEN)"),
    ("CKV_K8S_38", r"^Deployment\.(ops\.dbw-dbworker-operator|dbworker-system\.dbworker-operator|apps\.imgdedup(-console)?)$",
     "the operator needs its API token; the full sample Worker asks for one (automountServiceAccountToken), "
     "and its console's pod is the workers' pod"),
    ("CKV_K8S_40", r"^Deployment\.(imagededup\.postgres|apps\.imgdedup(-min)?(-console)?)$",
     "the uid is the image's USER (10001 in ours) unless spec.podSecurityContext.runAsUser sets one; "
     "the postgres image's own user is 70, and the full sample chooses 1000"),
    ("CKV_K8S_10|CKV_K8S_12|CKV_K8S_13", r"^Deployment\.apps\.imgdedup-min(-console)?$",
     "a Worker without spec.resources gets none (or the namespace's LimitRange): the operator cannot "
     "size your handlers, nor the console loading your application (spec.console.resources)"),
    ("CKV_K8S_9", r"^Deployment\.(ops\.dbw-dbworker-operator|dbworker-system\.dbworker-operator)$|"
                  r"^Pod\..*-test-healthz$",
     "no readiness probe for the operator (nothing routes traffic to it; kopf's guidance) or the test hook"),
    ("CKV_K8S_8", r"^Pod\..*-test-healthz$", "the helm test hook runs once and exits"),
    ("CKV2_K8S_5", r"^RoleBinding\.shop\.dbw-dbworker-operator-secrets$",
     "opt-in (secretChecks.namespaces): get secrets in one namespace, to report a missing key early"),
]


def _render(chart: helm.Chart, values: dict[str, Any] | None, *, name: str = RELEASE,
            namespace: str = NAMESPACE) -> list[dict[str, Any]]:
    rendered = chart.render(values, name=name, namespace=namespace, is_install=True)
    return [doc for path, text in rendered.items() if not path.endswith("NOTES.txt")
            for doc in yaml.safe_load_all(text) if doc]


def _workers() -> list[dict[str, Any]]:
    from dbworker_operator import kinds, spec
    from dbworker_operator.builders import owned

    from tests.k8s import samples

    everything = kinds.Capabilities(keda=True, pod_monitors=True, server_version=(1, 33))
    manifests = []
    # Each with its console (spec.console): a second Deployment and a Service.
    console = {"enabled": True, "tokenSecretRef": {"name": "imgdedup-console", "key": "tokens"}}
    for body in (samples.minimal("imgdedup-min"), samples.full()):
        body["spec"]["console"] = {**console, "resources": body["spec"].get("resources", {})}
        for wanted in owned.objects(spec.parse(body), everything):
            if wanted.manifest is not None:
                manifests.append(owned.owned_by(wanted.manifest, body))
    return manifests


def _scan(*args: str) -> list[dict[str, Any]]:
    """checkov's report per framework scanned."""
    assert CHECKOV is not None
    env = {**os.environ, "LOG_LEVEL": "ERROR", "BC_SKIP_MAPPING": "TRUE"}
    done = subprocess.run([CHECKOV, *args, "--output", "json", "--skip-download", "--quiet", "--compact"],
                          capture_output=True, text=True, timeout=300, env=env, check=False)
    assert done.returncode in (0, 1), done.stderr[-2000:]
    reports = json.loads(done.stdout) if done.stdout.strip() else []
    return reports if isinstance(reports, list) else [reports]


def _failed(reports: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    return [(f["check_id"], f["resource"], f["file_path"])
            for report in reports for f in (report.get("results") or {}).get("failed_checks", [])]


def _unaccepted(findings: list[tuple[str, str, str]]) -> tuple[list[tuple[str, str, str]], set[int]]:
    used: set[int] = set()
    left = []
    for check, resource, path in findings:
        hits = [i for i, (c, pattern, _) in enumerate(ACCEPTED)
                if check in c.split("|") and re.search(pattern, resource)]
        used.update(hits)
        if not hits:
            left.append((check, resource, path))
    return left, used


@pytest.mark.slow
def test_everything_shipped_passes_checkov_but_for_the_accepted_findings(tmp_path: Path) -> None:
    with helm.Chart.load(CHART) as chart:
        sets = {"chart-defaults": _render(chart, None), "chart-all-on": _render(chart, ALL_ON), "workers": _workers()}
    for name, documents in sets.items():
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump_all(documents))
    for manifest in ("rbac.yaml", "deployment.yaml", "admission-policy.yaml"):
        shutil.copy(REPO / "operator" / "manifests" / manifest, tmp_path / f"manifests-{manifest}")
    shutil.copytree(REPO / "examples" / "imagededup" / "deploy", tmp_path / "example",
                    ignore=shutil.ignore_patterns("Dockerfile*"))
    # Both Dockerfiles by names checkov reads as Dockerfiles: one scan of both frameworks
    # (checkov's start-up is most of a scan's time).
    shutil.copy(REPO / "operator" / "Dockerfile", tmp_path / "operator.Dockerfile")
    shutil.copy(REPO / "examples" / "imagededup" / "deploy" / "Dockerfile", tmp_path / "example.Dockerfile")
    reports = _scan("-d", str(tmp_path), "--framework", "kubernetes", "dockerfile")
    dockerfiles = [r["summary"]["resource_count"] for r in reports if r.get("check_type") == "dockerfile"]
    assert dockerfiles == [2], f"both Dockerfiles scanned: {[r.get('summary') for r in reports]}"
    findings = _failed(reports)
    left, used = _unaccepted(findings)
    assert not left, "checkov findings nobody accepted:\n" + "\n".join(map(str, left))
    stale = [ACCEPTED[i][:2] for i in range(len(ACCEPTED)) if i not in used]
    assert not stale, f"accepted findings that no longer occur (remove them): {stale}"


def test_the_scan_has_teeth(tmp_path: Path) -> None:
    """A privileged container running as root is reported, so a clean scan means something."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bad", "namespace": "x"},
           "spec": {"containers": [{"name": "c", "image": "busybox", "securityContext": {"privileged": True}}]}}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(pod))
    checks = {check for check, _, _ in _failed(_scan("-d", str(tmp_path), "--framework", "kubernetes"))}
    assert {"CKV_K8S_16", "CKV_K8S_20", "CKV_K8S_28"} <= checks  # privileged, escalation, NET_RAW
