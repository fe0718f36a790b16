"""Opening a file named by someone else (a job, a bundle, an upload) without trusting what it is."""

from __future__ import annotations

import errno
import os
import stat
from typing import BinaryIO


def open_regular(path) -> BinaryIO:
    """Open a file to read only if it is a regular file (after symlinks): a FIFO, /dev/zero, /dev/urandom or a
    socket named as a log, a job's output or a context would block or never end (issue 18, M3/L3/L4). The
    open itself cannot block (O_NONBLOCK, cleared once the file is known to be regular). Raises OSError."""
    st = os.stat(path)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(errno.EINVAL, "not a regular file (a FIFO, device or socket)", str(path))
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # replaced between the stat and the open
            raise OSError(errno.EINVAL, "not a regular file (a FIFO, device or socket)", str(path))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def shown_name(name: str) -> str:
    """A file name as text that can be printed and stored: bytes that are not UTF-8 (kept by the OS as lone
    surrogates) become U+FFFD. Used for locations, never to open the file."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return name.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
