"""``dbworker console``: the web console over an application's Coordinator.

``tokens`` (pure, no web dependencies) checks the sign-in tokens for the command's options;
the rest needs the ``console`` extra (FastAPI, Jinja2, itsdangerous): ``server`` runs it,
``app`` wires ``auth``, ``pages``, ``api`` and ``actions`` over ``queries``' reads.
"""
