"""The ``dbworker`` command and what only a pod needs: options, signals, health, HTTP, metrics.

The library never imports this package; it runs a ``Coordinator`` and reports on it.
"""
