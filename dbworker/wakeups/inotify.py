"""Block until files in a directory are written: Linux inotify, through ctypes (no dependency).

SQLite's commit watcher waits on this instead of waking every few milliseconds: a commit
by any process writes the database's ``-wal`` file (or the file itself, or its journal),
and the kernel reports the write at once. Elsewhere (not Linux, no inotify, no free
watch) ``DirectoryWrites.open`` returns None and the watcher polls.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import struct
import sys
from collections.abc import Iterable

IN_MODIFY = 0x00000002
IN_CREATE = 0x00000100
IN_MOVED_TO = 0x00000080
IN_Q_OVERFLOW = 0x00004000  # events were dropped: count it as a write
IN_NONBLOCK = 0o4000
IN_CLOEXEC = 0o2000000
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then the name


class DirectoryWrites:
    """Writes to the named files of one directory, as the kernel reports them."""

    def __init__(self, fd: int, names: Iterable[str]) -> None:
        self._fd = fd
        self._names = {os.fsencode(n) for n in names}

    @classmethod
    def open(cls, directory: str, names: Iterable[str]) -> DirectoryWrites | None:
        """Watch ``directory`` for writes to ``names``; None where inotify is not available."""
        if not sys.platform.startswith("linux"):
            return None
        try:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        except (OSError, AttributeError):
            return None
        if fd < 0:
            return None  # e.g. the user's inotify instance limit
        if libc.inotify_add_watch(fd, os.fsencode(directory), IN_MODIFY | IN_CREATE | IN_MOVED_TO) < 0:
            os.close(fd)
            return None
        return cls(fd, names)

    def wait(self, timeout: float) -> bool:
        """Up to ``timeout`` seconds for a write to one of the files; whether one came.

        Every event queued so far is read, so a burst of writes counts once.
        """
        ready, _, _ = select.select([self._fd], [], [], timeout)
        if not ready:
            return False
        written = False
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                return written
            offset = 0
            while offset + _EVENT.size <= len(data):
                _, mask, _, length = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size : offset + _EVENT.size + length].rstrip(b"\0")
                written = written or name in self._names or bool(mask & IN_Q_OVERFLOW)
                offset += _EVENT.size + length

    def close(self) -> None:
        os.close(self._fd)
