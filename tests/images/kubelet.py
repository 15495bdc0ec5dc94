"""A test kubelet: runs with podman the pods of the Deployments in the API emulator.

It plays the Deployment controller and the kubelet for one namespace, one pass every half
second: as many pods as a Deployment's ``replicas``, each its init containers run to exit 0,
then its container started as written (command, env with ``secretKeyRef`` values read from the
Secret, securityContext, the /tmp ``emptyDir`` as a tmpfs of its ``sizeLimit``, a memory limit,
``terminationMessagePath``), Pod objects in the emulator with their status (Ready from the
readiness probe's path, restarts, the last termination with its message), and the Deployment's
status. A pod beyond ``replicas``, or of a Deployment that is gone, is stopped with SIGTERM and
``terminationGracePeriodSeconds`` before SIGKILL. A container that exits is started again
(``restartPolicy: Always``), its termination kept as ``lastState``.

Not emulated: pod networking (every pod shares the host network, so each pod's
``DBWORKER_METRICS_PORT`` is set to a free port of its own and probed there), rollouts (a
changed template does not replace running pods), liveness and startup probes (never restart a
container), image pulls, scheduling, CPU limits and requests, ``envFrom``, volumes other than
``emptyDir``.
"""

from __future__ import annotations

import base64
import secrets
import subprocess
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.images import podman
from tests.k8s.harness import DEPLOYMENTS, NS, PODS, SECRETS, free_port

MERGE = {"Content-Type": "application/merge-patch+json"}


class ConfigError(Exception):
    """What the kubelet reports as CreateContainerConfigError."""


@dataclass
class Pod:
    name: str
    deployment: str
    spec: dict[str, Any]
    port: int
    log: Path
    container: str | None = None  # the running container's name
    restarts: int = 0
    last_terminated: dict[str, Any] | None = None
    waiting: dict[str, str] | None = None
    init_done: bool = False
    stopping: bool = False
    exits: list[int] = field(default_factory=list)  # exit codes of every container run of it


class Kubelet:
    """Runs the namespace's Deployments as podman containers until ``close()``."""

    def __init__(self, api: httpx.Client, tmp: Path) -> None:
        self.api = api
        self.tmp = tmp
        self.pods: dict[str, Pod] = {}
        self.stopped: list[Pod] = []  # pods scaled in or deleted, once their container exited
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    # ---- the loop ----

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                self.sync()
            except Exception as exc:  # noqa: BLE001 - reported by the test (check_kubelet asserts none)
                self.errors.append(repr(exc))

    def sync(self) -> None:
        deployments = {d["metadata"]["name"]: d for d in self.api.get(DEPLOYMENTS).json()["items"]}
        for name, dep in deployments.items():
            self._reconcile(name, dep)
        for pod in list(self.pods.values()):
            if pod.deployment not in deployments:
                self._scale_in(pod)
            elif not pod.stopping:
                self._observe(pod)
        for pod in [p for p in self.pods.values() if p.stopping]:
            self._reap(pod)

    def _reconcile(self, name: str, dep: dict[str, Any]) -> None:
        want = int(dep["spec"].get("replicas", 1))
        mine = [p for p in self.pods.values() if p.deployment == name and not p.stopping]
        for pod in mine[want:]:
            self._scale_in(pod)
        for _ in range(want - len(mine)):
            self._create(name, dep)
        live = [p for p in self.pods.values() if p.deployment == name and not p.stopping]
        ready = sum(1 for p in live if self._ready(p))
        self.api.patch(f"{DEPLOYMENTS}/{name}/status", headers=MERGE, json={"status": {
            "observedGeneration": dep["metadata"].get("generation", 1), "replicas": len(live),
            "readyReplicas": ready, "updatedReplicas": len(live), "availableReplicas": ready}}).raise_for_status()

    # ---- pods ----

    def _create(self, deployment: str, dep: dict[str, Any]) -> None:
        template = dep["spec"]["template"]
        name = f"{deployment}-{secrets.token_hex(3)}"
        pod = Pod(name, deployment, template["spec"], free_port(), self.tmp / f"{name}.termination-log")
        self.pods[name] = pod
        self.api.post(PODS, json={"metadata": {"name": name, "labels": template["metadata"].get("labels", {}),
                                               "annotations": template["metadata"].get("annotations", {})},
                                  "spec": template["spec"], "status": {"phase": "Pending"}}).raise_for_status()
        self._start(pod)

    def _start(self, pod: Pod) -> None:
        """Init containers to exit 0, then the container; config errors leave the pod waiting."""
        try:
            if not pod.init_done:
                for init in pod.spec.get("initContainers", []):
                    code = self._run_container(pod, init, detach=False)
                    if code != 0:
                        pod.last_terminated = self._terminated(pod, code)
                        pod.restarts += 1
                        return
                pod.init_done = True
            pod.container = self._run_container(pod, pod.spec["containers"][0], detach=True)
            pod.waiting = None
        except ConfigError as exc:
            pod.waiting = {"reason": "CreateContainerConfigError", "message": str(exc)}

    def _run_container(self, pod: Pod, container: dict[str, Any], *, detach: bool) -> Any:
        name = f"{podman.PREFIX}{pod.name}-{container['name']}-{pod.restarts}"
        options = self._options(pod, container)
        podman.podman("run", "--detach", f"--name={name}", *options, container["image"], *container["command"],
                      *container.get("args", []))
        if detach:
            return name
        code = int(podman.podman("wait", name, timeout=300).stdout.strip())
        pod.exits.append(code)
        podman.podman("rm", "--force", name, check=False)
        return code

    def _options(self, pod: Pod, container: dict[str, Any]) -> list[str]:
        env = {item["name"]: self._value(item) for item in container.get("env", [])}
        env["DBWORKER_METRICS_PORT"] = str(pod.port)  # one host network: a port per pod
        context = {**pod.spec.get("securityContext", {}), **container.get("securityContext", {})}
        options = ["--network=host", f"--env-file={self._env_file(pod, container, env)}"]
        if context.get("readOnlyRootFilesystem"):
            options += ["--read-only", "--read-only-tmpfs=false"]
        if "ALL" in (context.get("capabilities") or {}).get("drop", []):
            options.append("--cap-drop=ALL")
        if context.get("allowPrivilegeEscalation") is False:
            options.append("--security-opt=no-new-privileges")
        if context.get("privileged"):
            raise ConfigError("privileged containers are not run here")
        if "runAsUser" in context:
            options.append(f"--user={context['runAsUser']}:{context.get('runAsGroup', context['runAsUser'])}")
        elif context.get("runAsNonRoot"):
            user = podman.image_user(container["image"]).split(":")[0]
            if not user.isdigit() or user == "0":
                raise ConfigError(f"container has runAsNonRoot and image has non-numeric user ({user}), "
                                  "cannot verify user is non-root")
        volumes = {v["name"]: v for v in pod.spec.get("volumes", [])}
        for mount in container.get("volumeMounts", []):
            volume = volumes[mount["name"]]
            if "emptyDir" not in volume:
                raise ConfigError(f"volume {mount['name']}: only emptyDir is emulated")
            size = volume["emptyDir"].get("sizeLimit", "64Mi").replace("Mi", "m").replace("Gi", "g")
            options.append(f"--tmpfs={mount['mountPath']}:rw,size={size},mode=1777")
        memory = ((container.get("resources") or {}).get("limits") or {}).get("memory")
        if memory:
            options.append("--memory=" + memory.replace("Mi", "m").replace("Gi", "g"))
        if container.get("terminationMessagePath"):
            pod.log.write_text("")
            pod.log.chmod(0o666)
            options.append(f"--volume={pod.log}:{container['terminationMessagePath']}:rw")
        return options

    def _env_file(self, pod: Pod, container: dict[str, Any], env: dict[str, str]) -> Path:
        # A file, not --env: values (the database URL) stay off podman's command line.
        path = self.tmp / f"{pod.name}-{container['name']}.env"
        path.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        return path

    def _value(self, item: dict[str, Any]) -> str:
        if "value" in item:
            return str(item["value"])
        ref = item["valueFrom"]["secretKeyRef"]
        response = self.api.get(f"{SECRETS}/{ref['name']}")
        if response.status_code == 404:
            raise ConfigError(f'secret "{ref["name"]}" not found')
        data = response.json().get("data") or {}
        if ref["key"] not in data:
            raise ConfigError(f"couldn't find key {ref['key']} in Secret {NS}/{ref['name']}")
        return base64.b64decode(data[ref["key"]]).decode()

    def _terminated(self, pod: Pod, code: int) -> dict[str, Any]:
        message = pod.log.read_text().strip() if pod.log.exists() else ""
        return {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "message": message}

    def _ready(self, pod: Pod) -> bool:
        if pod.container is None:
            return False
        try:
            return httpx.get(f"http://127.0.0.1:{pod.port}/readyz", timeout=3).status_code == 200
        except httpx.HTTPError:
            return False

    def _observe(self, pod: Pod) -> None:
        """Restart an exited container, retry a waiting pod, report the pod's status."""
        if pod.container is not None and not podman.alive(pod.container):
            code = int(podman.podman("wait", pod.container).stdout.strip())
            pod.exits.append(code)
            pod.last_terminated = self._terminated(pod, code)
            podman.podman("rm", "--force", pod.container, check=False)
            pod.container, pod.restarts = None, pod.restarts + 1
        if pod.container is None:
            self._start(pod)
        ready = self._ready(pod)
        # Until its init containers are done, what happens is theirs to report.
        initializing = not pod.init_done and pod.spec.get("initContainers")
        container = (pod.spec["initContainers"] if initializing else pod.spec["containers"])[0]
        state: dict[str, Any] = ({"waiting": pod.waiting} if pod.waiting else
                                 {"running": {}} if pod.container else {"waiting": {"reason": "PodInitializing"}})
        status = {"name": container["name"], "ready": ready, "restartCount": pod.restarts,
                  "state": state, "image": container["image"]}
        if pod.last_terminated:
            status["lastState"] = {"terminated": pod.last_terminated}
        self.api.patch(f"{PODS}/{pod.name}/status", headers=MERGE, json={"status": {
            "phase": "Running" if pod.container else "Pending", "podIP": "127.0.0.1",
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
            "initContainerStatuses" if initializing else "containerStatuses": [status]}})

    def _scale_in(self, pod: Pod) -> None:
        """SIGTERM, SIGKILL after the pod's grace period (``podman stop --time``), in the background."""
        pod.stopping = True
        if pod.container is not None:
            grace = int(pod.spec.get("terminationGracePeriodSeconds", 30))
            subprocess.Popen(["podman", "stop", f"--time={grace}", pod.container],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _reap(self, pod: Pod) -> None:
        if pod.container is not None:
            if podman.alive(pod.container):
                return
            pod.exits.append(int(podman.podman("wait", pod.container).stdout.strip()))
            podman.podman("rm", "--force", pod.container, check=False)
        self.api.delete(f"{PODS}/{pod.name}")
        del self.pods[pod.name]
        self.stopped.append(pod)

    def containers(self, deployment: str) -> list[str]:
        """Names of the running containers of ``deployment``'s pods."""
        return [p.container for p in list(self.pods.values()) if p.deployment == deployment and p.container
                and not p.stopping]

    def close(self) -> None:
        """Stop the loop and remove every container it started."""
        self._stop.set()
        self._thread.join(60)
        for pod in list(self.pods.values()):
            if pod.container:
                podman.podman("rm", "--force", "--time=0", pod.container, check=False)
