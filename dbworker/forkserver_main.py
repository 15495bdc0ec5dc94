"""Imported by the fork server of handler processes, and only there (``spawning.PRELOAD``).

It imports what every handler process needs, so that each process forked from the server
has it already, and it keeps the server out of the signals its coordinator's process group
receives: a Ctrl-C or a SIGTERM sent to the whole group must not end the server, whose
processes the coordinator would then see as dead (the server reports their exit). The
server ends by itself when the coordinator and every process forked from it have ended.
"""

import os
import signal

import dbworker.aiochild
import dbworker.child  # noqa: F401

signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, signal.SIG_IGN)
try:
    os.setpgid(0, 0)
except OSError:
    pass
