"""Output files written whole: into a temporary file beside the destination, renamed over it once complete, so a
Ctrl-C, a full disk or an error midway leaves the earlier file (or none), never a truncated csv or invalid json."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def whole_file(path: str | Path) -> Iterator[Path]:
    """The path to write `path`'s content to: a temporary file beside it, renamed to it when the block ends without
    an error and removed when the block raises (KeyboardInterrupt too).

    Written in place instead, as a plain write would: a destination that is no regular file (/dev/null, /dev/stdout
    into a pipe, a FIFO), one in a folder that takes no new file, and a file its owner made read-only (so writing it
    fails as before rather than replacing it). A symbolic link to a file is followed: its target is replaced."""
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)  # follows links: /dev/stdout is the pipe or terminal behind it
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a loop of links: written in place, the write fails as a plain one would
            yield Path(path)
            return
        regular = None  # no such file (yet), or one that cannot be examined: the write below says why
    target = Path(os.path.realpath(path)) if regular is not False else Path(path)
    if regular is False or not os.access(target.parent, os.W_OK | os.X_OK) or \
            regular and not os.access(target, os.W_OK):
        yield target
        return
    try:
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=".kvcalc-", suffix=".partial")  # a short name, made anew
    except OSError:  # a folder that refuses new files though access() allowed it (/sys): the plain write says so
        yield target
        return
    os.close(fd)
    partial = Path(name)
    try:
        yield partial
        if regular:  # keep the file's permissions, as writing into it would
            os.chmod(partial, stat.S_IMODE(target.stat().st_mode))
        else:  # a new file's, as open() makes them (mkstemp's are 0600)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(partial, 0o666 & ~umask)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
