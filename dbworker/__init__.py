"""dbworker: background work on your application's own SQL database.

The public names below are the contract (SPEC.md); everything else may change.
"""

from dbworker.contract import ExecutionStatus, Finished, Outcome, Unfinished
from dbworker.coordinator import Coordinator

__version__ = "0.1.0"

__all__ = ["Coordinator", "ExecutionStatus", "Finished", "Outcome", "Unfinished", "__version__"]
