"""Pure builders: a parsed ``WorkerSpec`` in, Kubernetes manifest dicts out; no I/O, no kopf.

Each module builds one kind of object; ``owned`` lists everything a spec asks for, so the
handlers apply a list without knowing the kinds.
"""
