"""What every trace reader does before it parses: refuse a file too large, a missing one, binary bytes.

Why shared: a step trace, a request trace and a shapes file are each read line by line or whole, and
each must be refused in one line naming the file (and the line) before anything is built from it.
The size is checked with stat() before a byte is read, so a file too large costs nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from attnbench.errors import UsageError

# A trace file is read whole into Python objects (up to about 30 bytes of memory per byte of JSON
# for columns of small ints; steps.MAX_TRACE_ROWS bounds the rows too); a 10,000-step trace of 128
# requests a step takes about 9 MB.
MAX_TRACE_BYTES = 64 << 20


def checked_size(path: Path, what: str, limit: int | None = None) -> int:
    """The file's size, once it is a readable regular file of at most `limit` bytes and not empty."""
    limit = MAX_TRACE_BYTES if limit is None else limit
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    if not path.is_file():
        raise UsageError(f"{path}: the {what} is not a regular file")
    if size > limit:
        raise UsageError(f"{path}: the {what} is {size} bytes; at most {limit} bytes are read "
                         "(split it, or keep fewer steps)")
    if size == 0:
        raise UsageError(f"{path}: the {what} is empty")
    return size


def numbered_lines(path: Path, what: str, limit: int | None = None) -> Iterator[tuple[int, str]]:
    """(line number, text) for each non-blank line, after checked_size; bytes that are not UTF-8
    text name their line."""
    checked_size(path, what, limit)
    try:
        with path.open("rb") as f:
            for number, raw in enumerate(f, 1):
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError:
                    raise UsageError(f"{path}:{number}: not UTF-8 text (is this a {what}?)") from None
                if "\x00" in text:
                    raise UsageError(f"{path}:{number}: a NUL byte (is this a {what}?)")
                if text.strip():
                    yield number, text
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None


def json_line(path: Path, number: int, text: str) -> dict:
    """One JSON object of a JSON Lines file, or one line naming the file and the line."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than the parser goes
        raise UsageError(f"{path}:{number}: not a JSON object ({getattr(exc, 'msg', 'nested too deeply')})") \
            from None
    if not isinstance(value, dict):
        raise UsageError(f"{path}:{number}: expected a JSON object, got {type(value).__name__}")
    return value


def where(path: Path, number: int) -> str:
    return f"{path}:{number}"
