"""What every trace reader does before it parses: refuse a file too large, a missing one, binary bytes.

Why shared: a step trace, a request trace and a shapes file are each read line by line or whole, and
each must be refused in one line naming the file (and the line) before anything is built from it.
The size is checked with stat() before a byte is read, so a file too large costs nothing.

Every reader also takes its file gzip-compressed (told by the gzip magic bytes, whatever the name;
`trace.jsonl.gz`, `BurstGPT.csv.gz`), as real traces are often shipped. Such a file is held to the
same limit twice: its own size before a byte is read, and what it decompresses to while it is read,
a line at a time with the line bounded too, so a small file that decompresses to gigabytes is
refused after at most the limit's worth of bytes.
"""

from __future__ import annotations

import gzip
import json
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

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


GZIP_MAGIC = b"\x1f\x8b"


def base_suffix(path: Path) -> str:
    """The suffix that says a file's format, lower-cased, a trailing .gz left out: `.csv` for x.csv.gz."""
    return Path(Path(path).name.lower().removesuffix(".gz")).suffix


@contextmanager
def opened(path: Path, what: str) -> Iterator[BinaryIO]:
    """The file's bytes as a stream, decompressed when it starts with gzip's magic bytes; a broken
    gzip file or an unreadable one is one line naming it."""
    try:
        with path.open("rb") as raw:
            compressed = raw.read(2) == GZIP_MAGIC
            raw.seek(0)
            with (gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw) as stream:
                yield stream
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise UsageError(f"{path}: the {what} is not a readable gzip file ({exc or 'cut short'})") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None


def _too_large(path: Path, what: str, limit: int) -> UsageError:
    return UsageError(f"{path}: the {what} decompresses to more than {limit} bytes; at most {limit} bytes are read "
                      "(split it, or keep fewer steps)")


def numbered_lines(path: Path, what: str, limit: int | None = None) -> Iterator[tuple[int, str]]:
    """(line number, text) for each non-blank line, after checked_size, of the file or of what it
    decompresses to (at most `limit` bytes either way); bytes that are not UTF-8 text name their line."""
    limit = MAX_TRACE_BYTES if limit is None else limit
    checked_size(path, what, limit)
    with opened(path, what) as stream:
        number, total = 0, 0
        while raw := stream.readline(limit - total + 1):  # bounded: one line cannot outgrow the limit
            number, total = number + 1, total + len(raw)
            if total > limit:
                raise _too_large(path, what, limit)
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise UsageError(f"{path}:{number}: not UTF-8 text (is this a {what}?)") from None
            if "\x00" in text:
                raise UsageError(f"{path}:{number}: a NUL byte (is this a {what}?)")
            if text.strip():
                yield number, text


def read_text(path: Path, what: str, limit: int | None = None) -> str:
    """The whole file as text (UTF-8, undecodable bytes replaced), decompressed when gzip, after
    checked_size; at most `limit` bytes either way."""
    limit = MAX_TRACE_BYTES if limit is None else limit
    checked_size(path, what, limit)
    with opened(path, what) as stream:
        data = stream.read(limit + 1)
    if len(data) > limit:
        raise _too_large(path, what, limit)
    return data.decode("utf-8", errors="replace")


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
