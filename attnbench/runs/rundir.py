"""One run owns its directory: claim it, lock it, write into it atomically, record what it wrote, resume it.

Why: a run into a directory that already held one used to overwrite results.csv and leave the
old parquet beside it; two runs at once mixed their rows; a results.csv that was a symlink was
followed; `--force` removed files by their names, a user's own `notes.png` among them; a record
that named `../victim.txt` deleted it. Here, for every command that writes a run:
- a run claims `--out` only if it is new or empty, and never one that is or holds one of the
  command's `inputs` (runs/record.py check_apart);
- every top-level file and folder a run writes is recorded in `.attnbench-files.json`, and the
  record is checked before it is believed (runs/record.py): one that names anything but plain
  entries at the top of the folder, or is not whole JSON, is refused and nothing is removed;
- `--force` removes only what a valid record names (a link unlinked, not followed); a folder that
  holds anything but has no record is refused, never cleared by file names. `--resume` keeps
  results.csv and env.json (and the measured agreement.csv and telemetry.csv) and, once the job's
  checks pass (runs/resume.py), removes the recorded outputs made from them (reopen); without a
  record it resumes only a folder that holds nothing else;
- a folder a run makes inside its directory (`subdir`: profile/, workloads/) is made fresh, level
  by level: nothing is written through a link;
- a lock file (`.attnbench.lock`, the pid) refuses a second live run before anything is removed;
  a write into the directory that fails (read-only, full) ends the run in one error line;
- files are written to a temporary name and renamed over the final one (results/atomic.py), and
  results.csv is appended row by row through a descriptor opened with O_NOFOLLOW (files.RowWriter).
Resume keys: a point is finished when an earlier run holds a row for every (backend, strategy[,
mode]) this run needs (ResumeKey, one implementation for the kernel and e2e jobs).
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from attnbench.errors import AttnbenchError, UsageError
from attnbench.results import files
from attnbench.results.atomic import write_text_atomic
from attnbench.results.env import RESUME_MUST_MATCH, env_value
from attnbench.results.schema import read_env
from attnbench.runs.record import LOCK, RECORD, check_apart, leftovers, present, read_record, remove

SOURCES = ("results.csv", "env.json")  # what a resumed run needs
# e2e's agreement rows and the GPU telemetry samples are measured, not derived
KEPT_ON_RESUME = (*SOURCES, "agreement.csv", "telemetry.csv")


@dataclass(frozen=True)
class ResumeKey:
    """A point's identity (`columns`, compared as CSV text) and the row labels (`combo`) whose every
    needed combination an earlier run must hold for the point to count as finished."""

    columns: tuple[str, ...]
    combo: tuple[str, ...]
    defaults: dict = field(default_factory=dict)  # values of key columns older files lack

    def of(self, values: dict) -> tuple[str, ...]:
        return tuple(str(files.cell(values.get(c, self.defaults.get(c)))) for c in self.columns)

    def completed(self, rows: list[dict], needed: set[tuple]) -> set[tuple[str, ...]]:
        """Points with a row for every needed combination (a point that failed as a whole, one row
        with no strategy, counts as finished: the same inputs fail again)."""
        seen: dict[tuple[str, ...], set] = {}
        for row in rows:
            seen.setdefault(self.of(row), set()).add(tuple(row.get(c) for c in self.combo))
        return {key for key, combos in seen.items()
                if needed <= combos or any(all(v == "" for v in c[1:]) for c in combos)}


def _os_error(flag: str, path: Path, exc: OSError) -> UsageError:
    return UsageError(f"{flag}: cannot use {path}: {exc.strerror or exc}")


def _held(names: list[str]) -> str:
    return f"{names[0]}{f' and {len(names) - 1} more' if len(names) > 1 else ''}"


def _stamp(entry: Path) -> tuple[bool, int, int]:
    st = entry.lstat()
    return entry.is_dir() and not entry.is_symlink(), st.st_ino, st.st_mtime_ns


class RunDir:
    """A claimed run directory: what attnbench wrote there, its lock, env.json and rows."""

    def __init__(self, path: Path, flag: str = "--out"):
        self.path = Path(path)
        recorded = read_record(self.path, flag)  # checked name by name; UsageError before anything is removed
        self.has_record = recorded is not None
        self.written: set[str] = recorded or set()

    @classmethod
    def claim(cls, out: Path | None, resume: Path | None, force: bool, default: Path,
              inputs: tuple[Path, ...] = ()) -> RunDir:
        """The run's directory, prepared: `--resume DIR`, else `--out`, else `default`. Giving both
        `--resume` and another `--out` is refused (a resumed run writes where it began)."""
        if resume and out and Path(out) != Path(resume):
            raise UsageError(f"--resume/--out: resume writes into {resume}; leave --out out or give the same path")
        path = Path(resume or out or default)
        return cls.prepare(path, force=force, resume=bool(resume), flag="--resume" if resume else "--out",
                           inputs=inputs)

    @classmethod
    def prepare(cls, path: Path, force: bool = False, resume: bool = False, flag: str = "--out",
                inputs: tuple[Path, ...] | list[Path] = ()) -> RunDir:
        """Make `path` ready for a run: new, emptied of what its record says attnbench wrote (force)
        or resumable; never one that is or holds one of the command's `inputs`."""
        check_apart(path, inputs, flag)
        if path.is_symlink():  # to a folder too: the run would be written wherever it points
            raise UsageError(f"{flag}: {path} is a symlink; give the directory itself (nothing is written through one)")
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
        run = cls(path, flag)
        run.check_unlocked(flag)
        if resume:
            run.check_resumable_files()
            return run
        entries = sorted(p.name for p in path.iterdir() if p.name != LOCK)
        if force and entries and not run.has_record:
            raise UsageError(f"--out: {path} holds {_held(entries)} but no record of what attnbench wrote "
                             f"there ({RECORD}), so --force removes nothing; use another --out")
        if force:
            run.clear()
        elif entries:
            raise UsageError(f"{flag}: {path} is not empty (it holds {_held(entries)}); "
                             "choose a new directory, --resume it or --force over it")
        return run

    def check_resumable_files(self) -> None:
        """The files a resume keeps are the plain files an earlier run wrote; without a record, the
        folder holds nothing else (what else it held could be anyone's, and the run writes over it)."""
        for name in KEPT_ON_RESUME:
            entry = self.path / name
            if name in SOURCES and not present(entry):
                raise UsageError(f"--resume: {self.path} holds no {name} of an earlier run to resume")
            if present(entry) and (entry.is_symlink() or not entry.is_file()):
                what = "a link" if entry.is_symlink() else "a directory" if entry.is_dir() else "not a file"
                raise UsageError(f"--resume: {entry} is {what}, not the file an earlier run wrote")
        others = sorted(p.name for p in self.path.iterdir() if p.name not in (LOCK, *KEPT_ON_RESUME))
        if others and not self.has_record:
            raise UsageError(f"--resume: {self.path} holds {_held(others)} but no record of what "
                             f"attnbench wrote there ({RECORD}), so nothing there is removed or written over; "
                             "move those away or use another --out")

    def reopen(self) -> None:
        """Resume, once every check has passed: remove the outputs made from the files it keeps."""
        self.clear(keep=KEPT_ON_RESUME)
        self.record(*(self.path / name for name in KEPT_ON_RESUME if (self.path / name).is_file()))

    def outputs(self, keep: tuple[str, ...] = ()) -> list[Path]:
        """Entries of the directory that its record names (less `keep`), with the temporary files an
        interrupted write of one of them left; nothing the record does not name."""
        found = [self.path / n for n in self.written if n not in keep and present(self.path / n)]
        return sorted(set(found + leftovers(self.path, self.written)))

    def clear(self, keep: tuple[str, ...] = ()) -> None:
        for entry in self.outputs(keep):
            remove(entry)
        self.written &= set(keep)
        self._save()

    def subdir(self, *parts: str) -> Path:
        """The folder `parts` under the run, made level by level: a top-level entry of that name that
        this run did not write, or a link or a file at any level, is refused (no write through a link)."""
        self.check_fresh(parts[0])
        self.record(self.path / parts[0])
        where = self.path
        for part in parts:
            where = where / part
            try:
                where.mkdir()
            except FileExistsError:
                if where.is_symlink() or not where.is_dir():
                    raise UsageError(f"--out: {where} is {'a link' if where.is_symlink() else 'not a folder'}; "
                                     "attnbench writes nothing through it — use another --out") from None
        return where

    def check_fresh(self, *names: str) -> None:
        """Refuse top-level entries this run is about to write that are there and not attnbench's."""
        for name in names:
            if name not in self.written and present(self.path / name):
                raise UsageError(f"--out: {self.path / name} was there before this run (attnbench did not write "
                                 "it); nothing is written into or over it — use another --out")

    def record(self, *paths: Path) -> None:
        """Note files or folders of this directory as written by attnbench (by their top-level name)."""
        names = {Path(p).relative_to(self.path).parts[0] for p in paths}
        if not names <= self.written:
            self.written |= names
            self._save()

    def _save(self) -> None:
        write_text_atomic(self.path / RECORD, json.dumps({"written": sorted(self.written)}, indent=1) + "\n")
        self.has_record = True

    @contextmanager
    def recording(self) -> Iterator[RunDir]:
        """Record what the block writes at the top of the directory: new entries, and files that
        were rewritten. A folder that was there before is not taken over by a write inside it."""
        before = {p.name: _stamp(p) for p in self.path.iterdir()}
        try:
            yield self
        except BaseException:
            with suppress(OSError):  # the block's own error is the one to report
                self._record_changes(before)
            raise
        self._record_changes(before)

    def _record_changes(self, before: dict[str, tuple[bool, int, int]]) -> None:
        changed = []
        for entry in self.path.iterdir():
            if entry.name in (LOCK, RECORD) or entry.name.endswith(".tmp"):
                continue
            old = before.get(entry.name)
            if old is None or (not old[0] and old != _stamp(entry)):
                changed.append(entry)
        self.record(*changed)

    def check_unlocked(self, flag: str = "--out") -> None:
        """Refuse a directory another live run is writing to, or whose lock is not a lock file."""
        lock = self.path / LOCK
        if lock.is_dir() and not lock.is_symlink():
            raise UsageError(f"{flag}: {lock} is a directory, not attnbench's lock file; remove it if no run is "
                             "writing there")
        try:
            pid = int(lock.read_text().strip() or 0) if lock.is_file() else 0
        except (OSError, ValueError):
            pid = 0
        if pid and pid != os.getpid() and _pid_alive(pid):
            raise UsageError(f"{flag}: another attnbench run (pid {pid}) is writing to {self.path}")

    @contextmanager
    def locked(self) -> Iterator[RunDir]:
        """Hold the lock file for the run, recording what it writes; a stale lock is taken over. A
        write into the directory that fails (made read-only, a full disk) ends the run in one error
        that names the file; what results.csv already holds stays."""
        lock = self.path / LOCK
        for _ in range(2):
            self.check_unlocked()
            try:
                fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
                break
            except FileExistsError:
                lock.unlink(missing_ok=True)
            except OSError as exc:
                raise self._write_error(exc) from None
        else:
            raise UsageError(f"--out: cannot lock {self.path}")
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        try:
            with self.recording():
                yield self
        except OSError as exc:
            if exc.filename is None or Path(str(exc.filename)).parent != self.path:
                raise
            raise self._write_error(exc) from None
        finally:
            with suppress(OSError):  # a directory made read-only keeps the lock: a later run takes it over
                lock.unlink(missing_ok=True)

    def _write_error(self, exc: OSError) -> AttnbenchError:
        name = Path(str(exc.filename)).name if exc.filename else str(self.path)
        if name.startswith(".") and name.endswith(".tmp"):  # replace_atomic's temporary .NAME.XXXXXXXX.tmp
            name = name[1:-4].rsplit(".", 1)[0]
        kept = " (results.csv keeps every point saved before)" if (self.path / "results.csv").is_file() else ""
        return AttnbenchError(f"cannot write {name} in {self.path}: {exc.strerror or exc}{kept}")

    def write_text(self, name: str, text: str) -> Path:
        self.record(self.path / name)
        return write_text_atomic(self.path / name, text)

    def write_env(self, env: dict) -> None:
        self.record(self.path / "env.json")
        files.write_env(self.path, env)

    def row_writer(self, keep: list[dict] | None = None, columns: list[str] = files.COLUMNS) -> files.RowWriter:
        """results.csv, appended a finished point at a time (rewritten with `keep` on resume); a job
        whose rows carry columns of its own (a replay's bucket) passes them."""
        self.record(self.path / "results.csv")
        return files.RowWriter(self.path, keep=keep, columns=columns)

    def read_env(self) -> dict:
        """env.json, checked as every reader checks it (results/schema.py)."""
        try:
            return read_env(self.path / "env.json")
        except AttnbenchError as exc:
            raise UsageError(f"--resume: {exc}") from None

    def check_resumable(self, old_env: dict, new_env: dict) -> None:
        """Refuse to add rows measured on another GPU or with other library versions."""
        for key in RESUME_MUST_MATCH:
            old, new = env_value(old_env, key), env_value(new_env, key)
            if old != new:
                raise UsageError(f"--resume: {self.path} was measured with {key} = {old!r}, this run has {new!r}; "
                                 "start a new directory instead")

    def read_rows(self) -> list[dict]:
        """The rows of an earlier run's results.csv, as strings, once it reads as a whole CSV table
        (files.read_table: UTF-8, no NUL, one field count, no quote left open, not cut short)."""
        try:
            return files.read_table(self.path / "results.csv", {})[1]
        except AttnbenchError as exc:
            raise UsageError(f"--resume: {exc}") from None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as exc:  # PermissionError: a live process of another user
        return not isinstance(exc, ProcessLookupError)
    return True
