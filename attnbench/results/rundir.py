"""One run owns its directory: claim it, lock it, write into it atomically, and resume it.

Why: a run into a directory that already held one used to overwrite results.csv and leave the
old parquet beside it; two runs at once mixed their rows; a results.csv that was a symlink was
followed. Here:
- a run claims `--out` only if it is new or empty; `--force` first removes what attnbench wrote
  there (its own file names only, links unlinked, never followed); `--resume` keeps results.csv
  and env.json and removes the outputs made from them;
- a lock file (`.attnbench.lock`, holding the pid) refuses a second live run in the directory;
- every file is written to a temporary name in the directory and renamed over the final one, so
  a reader never sees half a file and a symlink in the way is replaced, not followed;
- results.csv is appended row by row through a descriptor opened with O_NOFOLLOW.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from attnbench.errors import UsageError

LOCK = ".attnbench.lock"
SOURCES = ("results.csv", "env.json")  # what a resumed run needs
# e2e's agreement rows and the GPU telemetry samples are measured, not derived
KEPT_ON_RESUME = (*SOURCES, "agreement.csv", "telemetry.csv")
DERIVED = ("results.parquet", "summary.md", "agreement.csv", "telemetry.csv", "profile_kernels.csv", "profile.md",
           "scenario.json")
DERIVED_GLOBS = ("*.png", "profile", "context-*", ".*.tmp")


def _os_error(flag: str, path: Path, exc: OSError) -> UsageError:
    return UsageError(f"{flag}: cannot use {path}: {exc.strerror or exc}")


def attnbench_outputs(path: Path, keep: tuple[str, ...] = ()) -> list[Path]:
    """Entries of a run directory that attnbench writes (less `keep`)."""
    names = [*SOURCES, *DERIVED]
    found = [path / n for n in names if n not in keep and ((path / n).is_symlink() or (path / n).exists())]
    for pattern in DERIVED_GLOBS:
        found += [p for p in path.glob(pattern) if p.name not in keep]
    return sorted(set(found))


def _remove(entry: Path) -> None:
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    else:
        entry.unlink()


def prepare(path: Path, force: bool = False, resume: bool = False, flag: str = "--out") -> Path:
    """Make `path` ready for a run: new, emptied of attnbench's outputs (force) or resumable."""
    if path.is_symlink() and not path.is_dir():
        raise UsageError(f"{flag}: {path} is a symlink to a file, not a directory")
    if path.exists() and not path.is_dir():
        raise UsageError(f"{flag}: {path} is a file, not a directory")
    if resume and not path.is_dir():
        raise UsageError(f"--resume: {path} is not a directory of an earlier run")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _os_error(flag, path, exc) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise UsageError(f"{flag}: {path} is not writable")
    entries = [p for p in path.iterdir() if p.name != LOCK]
    if resume:
        for name in SOURCES:
            if (path / name).is_symlink() or not (path / name).is_file():
                raise UsageError(f"--resume: {path} holds no {name} of an earlier run to resume")
        outputs = attnbench_outputs(path, keep=KEPT_ON_RESUME)
    elif force:
        outputs = attnbench_outputs(path)
    else:
        if entries:
            raise UsageError(f"{flag}: {path} is not empty (it holds {entries[0].name}"
                             f"{f' and {len(entries) - 1} more' if len(entries) > 1 else ''}); "
                             "choose a new directory, --resume it or --force over it")
        return path
    for entry in outputs:
        _remove(entry)
    return path


def claim(out: Path | None, resume: Path | None, force: bool, default: Path) -> Path:
    """The run's directory, prepared: `--resume DIR`, else `--out`, else `default`. Giving both
    `--resume` and another `--out` is refused (a resumed run writes where it began)."""
    if resume and out and Path(out) != Path(resume):
        raise UsageError(f"--resume/--out: resume writes into {resume}; leave --out out or give the same path")
    path = Path(resume or out or default)
    return prepare(path, force=force, resume=bool(resume), flag="--resume" if resume else "--out")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def locked(path: Path) -> Iterator[Path]:
    """Hold the run directory's lock file for the duration of a run; a stale lock is taken over."""
    lock = path / LOCK
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
            break
        except FileExistsError:
            try:
                pid = int(lock.read_text().strip() or 0)
            except (OSError, ValueError):
                pid = 0
            if pid and pid != os.getpid() and _pid_alive(pid):
                raise UsageError(f"--out: another attnbench run (pid {pid}) is writing to {path}") from None
            lock.unlink(missing_ok=True)
    else:
        raise UsageError(f"--out: cannot lock {path}")
    with os.fdopen(fd, "w") as f:
        f.write(str(os.getpid()))
    try:
        yield path
    finally:
        lock.unlink(missing_ok=True)


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


def read_env(path: Path) -> dict:
    try:
        env = json.loads((path / "env.json").read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"--resume: {path}/env.json is unreadable ({exc})") from None
    if not isinstance(env, dict):
        raise UsageError(f"--resume: {path}/env.json is not a JSON object")
    return env


RESUME_MUST_MATCH = ("attnbench_version", "torch", "torch_cuda", "gpu.name", "backend_libraries")


def _get(env: dict, dotted: str):
    for part in dotted.split("."):
        env = env.get(part) if isinstance(env, dict) else None
    return env


def check_resumable(old_env: dict, new_env: dict, path: Path) -> None:
    """Refuse to add rows measured on another GPU or with other library versions."""
    for key in RESUME_MUST_MATCH:
        old, new = _get(old_env, key), _get(new_env, key)
        if old != new:
            raise UsageError(f"--resume: {path} was measured with {key} = {old!r}, this run has {new!r}; "
                             "start a new directory instead")


def read_rows(path: Path) -> list[dict]:
    """The rows of an earlier run's results.csv, as strings."""
    try:
        with (path / "results.csv").open(newline="") as f:
            return list(csv.DictReader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UsageError(f"--resume: {path}/results.csv is unreadable ({exc})") from None
