"""dbworker: background work on your application's own SQL database.

The public names below are the contract (docs/contract.md) and what was added beside it (retries,
``Unfinished(after=)``); everything else may change.
"""

from dbworker.contract import (
    ExecutionStatus,
    Finished,
    Handler,
    LostClaim,
    Outcome,
    Unfinished,
    now,
)
from dbworker.coordinator import Coordinator
from dbworker.limits import Limit
from dbworker.progress import report_progress
from dbworker.retries import Retry
from dbworker.sql.claims import Claim

__version__ = "0.1.0"

__all__ = [
    "Claim",
    "Coordinator",
    "ExecutionStatus",
    "Finished",
    "Handler",
    "Limit",
    "LostClaim",
    "Outcome",
    "Retry",
    "Unfinished",
    "__version__",
    "now",
    "report_progress",
]
