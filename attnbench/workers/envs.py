"""The two sides of `attnbench ab`: which Python runs a side's worker, and which attnbench it imports.

A side is `python=PATH` (an interpreter, e.g. another venv with another kernel library version),
`src=DIR` (a checkout of attnbench, put first on that worker's PYTHONPATH), and any number of
`NAME=VALUE` environment variables for that worker alone (upper-case names: a test-only backend
through ATTNBENCH_EXTRA_BACKENDS, CUDA_VISIBLE_DEVICES, ...), comma-separated. Left out, python
is this interpreter and src this attnbench's own checkout, so two venvs need only `python=`, and
two checkouts only `src=`. Everything is checked before any worker starts, a PYTHONPATH's entries
too (a worker skips one that is not a folder without a word).
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import attnbench
from attnbench.errors import UsageError

ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
HERE_SRC = Path(attnbench.__file__).resolve().parent.parent  # the checkout this command runs from


@dataclass(frozen=True)
class Side:
    """One side's worker: its interpreter, the checkout it imports, and its own environment variables."""

    name: str  # baseline or candidate
    python: Path
    src: Path
    variables: dict[str, str] = field(default_factory=dict)

    def environ(self) -> dict[str, str]:
        """The worker's environment: ours, its own variables, and its checkout first on PYTHONPATH
        (then a PYTHONPATH it was given, then ours)."""
        path = os.pathsep.join(filter(None, [str(self.src), self.variables.get("PYTHONPATH"),
                                             os.environ.get("PYTHONPATH")]))
        return {**os.environ, **self.variables, "PYTHONPATH": path}

    def describe(self) -> dict:
        return {"python": str(self.python), "src": str(self.src), "variables": dict(self.variables)}


def parse_side(text: str, name: str) -> Side:
    """`--baseline` / `--candidate` text -> a checked Side (UsageError naming the flag)."""
    flag = f"--{name}"
    python, src, variables = None, None, {}
    for part in filter(None, (p.strip() for p in str(text).split(","))):
        key, sep, value = part.partition("=")
        if not sep or not value:
            raise UsageError(f"{flag}: {part!r} is not KEY=VALUE; give python=PATH, src=DIR or NAME=VALUE "
                             "(e.g. python=/venv/bin/python,src=/checkout)")
        if key == "python":
            python = _python(value, flag)
        elif key == "src":
            src = _checkout(value, flag)
        elif key == "PYTHONPATH":
            variables[key] = _pythonpath(value, flag)
        elif ENV_NAME.fullmatch(key):
            variables[key] = value
        else:
            raise UsageError(f"{flag}: unknown key {key!r}; use python=, src= or an upper-case environment "
                             "variable NAME=")
    if python is None and src is None and not variables:
        raise UsageError(f"{flag}: empty; give python=PATH and/or src=DIR (e.g. src=/checkout)")
    return Side(name, python or Path(sys.executable), src or HERE_SRC, variables)


def _python(value: str, flag: str) -> Path:
    path = Path(value).expanduser()
    if not path.exists():
        raise UsageError(f"{flag}: python={value}: no such file")
    if path.is_dir() or not os.access(path, os.X_OK):
        raise UsageError(f"{flag}: python={value}: not an executable file (give the interpreter, e.g. "
                         "/venv/bin/python)")
    return path.absolute()  # a venv's python is a symlink: resolving it would leave the venv


def _checkout(value: str, flag: str) -> Path:
    path = Path(value).expanduser().resolve()
    if not path.is_dir():
        raise UsageError(f"{flag}: src={value}: not a directory")
    if not (path / "attnbench" / "__init__.py").is_file():
        raise UsageError(f"{flag}: src={value}: not an attnbench checkout (no attnbench/__init__.py in it)")
    return path


def _pythonpath(value: str, flag: str) -> str:
    """Each entry a folder (or a .zip of modules), as Python would import from it; one that is not
    would be skipped by the worker without a word, and the side would run other code than asked."""
    for entry in filter(None, value.split(os.pathsep)):
        path = Path(entry).expanduser()
        if not (path.is_dir() or (path.is_file() and path.suffix == ".zip")):
            what = "no such folder" if not path.exists() else "not a folder (nor a .zip)"
            raise UsageError(f"{flag}: PYTHONPATH={value}: {entry}: {what}; each {os.pathsep}-separated entry is a "
                             "folder Python imports from")
    return value


def check_sides(baseline: Side, candidate: Side) -> None:
    """Two sides that would run the same thing are refused: an A/A run says so by giving the same
    spec with a variable that tells them apart (e.g. AB_SIDE=a / AB_SIDE=b)."""
    if (baseline.python, baseline.src, baseline.variables) == (candidate.python, candidate.src, candidate.variables):
        raise UsageError(f"--baseline/--candidate: both run {candidate.python} on {candidate.src}; give two "
                         "checkouts (src=), two interpreters (python=), or, for an A/A run, a variable that "
                         "tells them apart (e.g. AB_SIDE=b)")
