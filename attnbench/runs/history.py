"""`attnbench history add` / `list`: file a finished run into a history directory, and list one.

The job checks everything before it writes: the run reads as every tool reads it (results.csv and
env.json through their checked readers), the history is a history (or new), and no entry with the
same key is there unless --replace. Then the run's files are copied into a temporary folder inside
the history, renamed into place, and index.json is rewritten atomically; the run is only read.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from attnbench.errors import UsageError
from attnbench.results.atomic import write_text_atomic
from attnbench.results.history import (INDEX, RUNS, Entry, in_order, index_text, new_entry, read_index)
from attnbench.results.read import TRACE, load_run
from attnbench.results.schema import read_env


def check_history(history: Path, must_exist: bool, flag: str = "--history") -> None:
    """A history directory: new (when not `must_exist`), or one holding index.json; never a link or a file."""
    if os.path.islink(history):
        raise UsageError(f"{flag}: {history} is a symlink; give the history directory itself")
    if os.path.exists(history) and not os.path.isdir(history):
        raise UsageError(f"{flag}: {history} is a file, not a history directory")
    if not os.path.isdir(history):
        if must_exist:
            raise UsageError(f"{flag}: {history} does not exist; file a run into it with `attnbench history add`")
        return
    index = history / INDEX
    if os.path.islink(index) or (os.path.exists(index) and not os.path.isfile(index)):
        raise UsageError(f"{flag}: {index} is not a file")
    no_links(history, flag)
    if not os.path.exists(index) and any(history.iterdir()):
        raise UsageError(f"{flag}: {history} holds files but no {INDEX}: not a history; give a new directory")


def no_links(history: Path, flag: str) -> None:
    """Nothing under the history is a symlink: `history add` writes into runs/ and its entries, and a
    link there (a shared folder travels) would carry those writes outside the history."""
    for folder, names, files in os.walk(history):  # walk does not follow links to folders
        link = next((name for name in sorted([*names, *files]) if os.path.islink(os.path.join(folder, name))), None)
        if link is not None:
            raise UsageError(f"{flag}: {os.path.join(folder, link)} is a symlink; a history holds no links "
                             "(attnbench writes nothing through one): replace it with the folder or file itself")


def check_run(run: Path) -> None:
    if not os.path.isdir(run):
        raise UsageError(f"RUN: {run} is not a run directory (one holding results.csv and env.json)")
    for name in ("results.csv", "env.json"):
        if not os.path.isfile(run / name):
            raise UsageError(f"RUN: {run} holds no {name}; history add files a finished run's directory")


def add(run: Path, history: Path, commit: str | None, date: str | None, replace: bool) -> tuple[Entry, bool]:
    """File RUN into HISTORY; (the entry, whether it replaced one)."""
    check_run(run)
    inside = os.path.realpath(history)
    if inside == os.path.realpath(run) or inside.startswith(os.path.realpath(run) + os.sep):
        raise UsageError(f"--history: {history} is inside RUN {run}; give a history directory outside the run")
    check_history(history, must_exist=False)
    loaded = load_run(run, "RUN")
    if loaded.kind is TRACE:
        raise UsageError(f"RUN: {run} is {loaded.kind.describe()}; history keeps kernel sweeps, e2e grid, replay "
                         "and atlas runs")
    entry = new_entry(loaded, read_env(run / "env.json", f"RUN: {run / 'env.json'}"), run, commit, date)
    entries = read_index(history)
    same = [e for e in entries if e.key() == entry.key()]
    if same and not replace:
        raise UsageError(f"--history: {history} already holds this run (entry {same[0].id}: commit {entry.commit}, "
                         f"{entry.date}, {entry.gpu}, the same libraries and rows); give --replace to file it again")
    copy_entry(run, history, entry)
    kept = [e for e in entries if e.key() != entry.key()]  # the same key is the same id: its folder was replaced
    write_text_atomic(history / INDEX, index_text([*kept, entry]))
    return entry, bool(same)


def copy_entry(run: Path, history: Path, entry: Entry) -> None:
    """The run's files into HISTORY/runs/<id>/, through a temporary folder renamed into place."""
    runs = history / RUNS
    try:
        runs.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=runs, prefix=f".{entry.id}.", suffix=".tmp"))
        try:
            for name in entry.files:
                shutil.copyfile(run / name, staging / name)
            target = runs / entry.id
            if target.is_dir() and not target.is_symlink():  # --replace: the old folder moves aside first
                old = Path(tempfile.mkdtemp(dir=runs, prefix=f".{entry.id}.", suffix=".old.tmp"))
                os.replace(target, old / entry.id)
                os.replace(staging, target)
                shutil.rmtree(old)
            else:
                os.replace(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    except OSError as exc:
        raise UsageError(f"--history: cannot write into {history}: {exc.strerror or exc}") from None


def entries(history: Path, flag: str = "--history") -> list[Entry]:
    """The history's entries, oldest first."""
    check_history(history, must_exist=True, flag=flag)
    return in_order(read_index(history, flag))
