"""`python -m dbworker_operator`: kopf with our registry, a liveness endpoint, peering, metrics.

Configuration comes only from DBWORKER_OPERATOR_* variables (config.py); a bad one exits 2
with one line naming it, before anything touches the cluster.
"""

from __future__ import annotations

import asyncio
import logging
import sys

import kopf
from prometheus_client import CollectorRegistry, start_http_server

from dbworker_operator import config as configuration
from dbworker_operator import handlers, metrics


def main() -> int:
    try:
        config = configuration.from_env()
    except configuration.ConfigError as exc:
        print(f"dbworker-operator: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=config.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # kopf logs every handler call at INFO; keep its chatter one level below ours.
    logging.getLogger("kopf").setLevel(max(logging.getLevelName(config.log_level), logging.WARNING))
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # a line per liveness probe is noise
    registry = CollectorRegistry()
    operator_metrics = metrics.build(registry)
    if config.metrics_port:
        start_http_server(config.metrics_port, registry=registry)
    memo = kopf.Memo(runtime=handlers.Runtime(config=config, metrics=operator_metrics))
    logging.getLogger("dbworker_operator").info(
        "starting: %s, peering %s, priority %s", "cluster-wide" if config.clusterwide else
        "namespaces " + ",".join(config.namespaces), "off" if config.standalone else config.peering,
        config.priority)
    asyncio.run(kopf.operator(
        registry=handlers.registry,
        clusterwide=config.clusterwide,
        namespaces=list(config.namespaces),
        standalone=config.standalone,
        priority=config.priority,
        peering_name=None if config.standalone else config.peering,
        liveness_endpoint=f"http://0.0.0.0:{config.liveness_port}/healthz",
        identity=config.identity,  # type: ignore[arg-type]  # kopf's Identity is a private NewType of str
        memo=memo,
    ))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
