"""Atomic writes: a reader never sees half a file, and a symlink in the way is replaced, not followed.

Every file of a run directory is written to a temporary name beside it and renamed over the final
one. results/ writes its files this way, and runs/rundir.py, which owns a run directory, too.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

# the process's umask, read once at import (os.umask can only be read by setting it): mkstemp makes
# its file 0600, and a results file should get the mode any other file the user writes gets
_UMASK = os.umask(0)
os.umask(_UMASK)
FILE_MODE = 0o666 & ~_UMASK


def replace_atomic(path: Path, write: Callable[[Path], object]) -> Path:
    """`write(tmp)` fills a temporary file in the same directory, then it is renamed over `path`."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.fchmod(fd, FILE_MODE)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def write_text_atomic(path: Path, text: str) -> Path:
    return replace_atomic(path, lambda tmp: tmp.write_text(text))
