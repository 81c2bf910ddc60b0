"""Output files written whole: into a temporary file beside the destination, renamed over it once complete, so a
Ctrl-C, a full disk or an error midway leaves the earlier file (or none), never a truncated csv or invalid json."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def whole_file(path: str | Path) -> Iterator[Path]:
    """The path to write `path`'s content to: a temporary file beside it, renamed to it when the block ends without
    an error and removed when the block raises (KeyboardInterrupt too). A destination that exists and is no regular
    file (/dev/null, a FIFO, a terminal) is written directly, as there is nothing to rename over, and so is one in a
    folder that takes no new file (a writable file there is still written, as before); a symbolic link is followed,
    so its target is replaced, as writing through it would."""
    target = Path(os.path.realpath(path))
    if target.exists() and not target.is_file() or not os.access(target.parent, os.W_OK | os.X_OK):
        yield target
        return
    partial = target.with_name(f".{target.name[:200]}.{os.getpid()}.partial")  # within a name's 255 bytes
    try:
        yield partial
        if target.exists():  # keep the file's permissions, as writing into it would
            os.chmod(partial, stat.S_IMODE(target.stat().st_mode))
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
