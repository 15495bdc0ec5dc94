"""``python -m dbworker``: the same command as the ``dbworker`` console script (see ``cli``)."""

from dbworker.pod.cli import main

raise SystemExit(main())
