"""Atomic writes: a reader never sees half a file, and a symlink in the way is replaced, not followed.

Every file of a run directory is written to a temporary name beside it and renamed over the final
one. results/ writes its files this way, and runs/rundir.py, which owns a run directory, too.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable


def replace_atomic(path: Path, write: Callable[[Path], object]) -> Path:
    """`write(tmp)` fills a temporary file in the same directory, then it is renamed over `path`."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
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
