"""dbworker-operator: keeps Kubernetes matching `Worker` custom resources (group dbworker.dev).

The package is split by role (see operator/README.md): crd.py defines the resource, spec.py reads it, builders/
turn a parsed spec into manifests, handlers.py wires them into kopf, kube.py talks to the API.
"""

__version__ = "0.1.0"
