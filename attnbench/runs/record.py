"""The record of what a run wrote (`.attnbench-files.json`), read as a claim to check, never believed.

Why: results folders travel (shared, downloaded by CI, filed in a history), and `--force` and
`--resume` remove what the record names. Taken as it was, a record naming `../victim.txt`, an
absolute path or `.` deleted outside the folder or the folder itself, and a half-written one ended
in a traceback. Here a record is a JSON object `{"written": [NAME, ...]}` whose every NAME is one
plain entry at the top of the run folder (no `/`, not `.` or `..`, no NUL, not the lock or the
record itself); anything else is refused in one line before anything is removed. An entry it names
is removed where it stands: a link is unlinked, never followed, and only a real folder is emptied.
An `--out` that is an input of the command, or holds one, is refused the same way (check_apart).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
from pathlib import Path
from typing import Iterable

from attnbench.errors import UsageError

LOCK = ".attnbench.lock"
RECORD = ".attnbench-files.json"
MAX_RECORD_BYTES = 1 << 20  # a record of every file a run could write is a few kB
MAX_NAME_BYTES = 255  # one path component on Linux and macOS


def refused(folder: Path, why: str, flag: str = "--out") -> UsageError:
    return UsageError(f"{flag}: {folder / RECORD} is not a record attnbench wrote ({why}); nothing was removed — "
                      "use another --out")


def name_problem(name: object) -> str | None:
    """Why `name` cannot be an entry a run wrote at the top of its folder (None when it can be)."""
    if not isinstance(name, str):
        return f"it names {type(name).__name__} {_shown(name)}, not a file name"
    if name in ("", ".", ".."):
        return f"it names {name!r}, not an entry of the folder"
    if "/" in name or (os.altsep and os.altsep in name) or "\0" in name:
        return f"it names {_shown(name)}, not one entry at the top of the folder"
    if name in (LOCK, RECORD):
        return f"it names {name}, attnbench's own"
    try:
        size = len(os.fsencode(name))
    except UnicodeEncodeError:
        return f"it names {_shown(name)}, which no file system can hold"
    return f"it names {_shown(name)}, longer than a file name can be" if size > MAX_NAME_BYTES else None


def _shown(value: object) -> str:
    text = repr(value)  # repr: a newline or a control character in a name stays on the one error line
    return text if len(text) <= 60 else text[:57] + "..."


def read_record(folder: Path, flag: str = "--out") -> set[str] | None:
    """The names the folder's record holds, each checked (None when there is no record)."""
    path = folder / RECORD
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise refused(folder, f"it cannot be read: {exc.strerror or exc}", flag) from None
    if stat.S_ISLNK(st.st_mode):
        raise refused(folder, "it is a link", flag)
    if not stat.S_ISREG(st.st_mode):
        raise refused(folder, "it is not a file", flag)
    if st.st_size > MAX_RECORD_BYTES:
        raise refused(folder, f"it is {st.st_size} bytes", flag)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            doc = json.loads(f.read(MAX_RECORD_BYTES + 1).decode("utf-8"))
    except OSError as exc:
        raise refused(folder, f"it cannot be read: {exc.strerror or exc}", flag) from None
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise refused(folder, "it is not whole UTF-8 JSON", flag) from None
    if not isinstance(doc, dict) or set(doc) != {"written"} or not isinstance(doc["written"], list):
        raise refused(folder, 'it is not a JSON object {"written": [names]}', flag)
    for name in doc["written"]:
        problem = name_problem(name)
        if problem:
            raise refused(folder, problem, flag)
    return set(doc["written"])


def leftovers(folder: Path, names: Iterable[str]) -> list[Path]:
    """The temporary files an interrupted atomic write of one of `names` left: `.NAME.XXXXXXXX.tmp`
    (results/atomic.py), matched by name, not as a glob pattern (a name may hold `*` or `[`)."""
    pattern = re.compile("|".join(rf"\.{re.escape(name)}\.[a-z0-9_]{{8}}\.tmp" for name in names) or r"(?!)")
    return [entry for entry in folder.iterdir() if pattern.fullmatch(entry.name)]


def present(entry: Path) -> bool:
    return entry.is_symlink() or entry.exists()


def remove(entry: Path) -> None:
    """Remove one entry where it stands: a real folder with everything in it (shutil.rmtree follows
    no link inside), anything else, a link to a folder included, unlinked."""
    try:
        mode = os.lstat(entry).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode):
        shutil.rmtree(entry)
    else:
        os.unlink(entry)


def check_apart(out: Path, inputs: Iterable[Path], flag: str = "--out",
                what: str = "an input of this command") -> None:
    """Refuse an `out` that is one of `inputs` or holds one, as written and through links: what
    `--force` clears there, or a write replaces, would be the input."""
    outs = {Path(os.path.realpath(out)), Path(os.path.abspath(out))}
    for path in inputs:
        places = {Path(os.path.realpath(path)), Path(os.path.abspath(path))}
        if places & outs:
            raise UsageError(f"{flag}: {out} is {path}, {what}; nothing was touched — choose another {flag}")
        if outs & {parent for place in places for parent in place.parents}:
            raise UsageError(f"{flag}: {out} holds {path}, {what}; nothing was touched — choose a {flag} "
                             "outside the inputs")
