"""A history directory: runs filed one per entry, keyed by commit, date, GPU and library versions.

Why: `compare` judges two runs and the github-action-benchmark JSON keeps one number per series;
nothing kept every run, so nothing could draw a row over commits or find the commit at which it
moved. A history is plain files a CI job can keep in a branch or an artifact:

    HISTORY/index.json          {"format": FORMAT, "entries": [Entry, ...]} in the order filed
    HISTORY/runs/<id>/          results.csv and env.json as the run wrote them (and cells.csv,
                                the atlas's cells, when the run has one)

An entry is read back through the same checked readers as any run (read.load_run, schema.read_env).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import numpy as np
import pandas as pd

from attnbench.errors import AttnbenchError
from attnbench.results.atlas_cells import CELL_COLUMNS
from attnbench.results.files import load_results
from attnbench.results.read import E2E, MEASURED, Run, canonical, kind_of
from attnbench.results.schema import read_env

FORMAT = "attnbench-history/1"
INDEX = "index.json"
RUNS = "runs"
FILED = ("results.csv", "env.json")  # every entry has both
OPTIONAL = ("cells.csv",)            # the atlas's cells (a `winner` column), filed when a run has them


@dataclass(frozen=True)
class Entry:
    """One filed run: what it was measured with (the key) and what it holds."""

    id: str
    commit: str
    date: str                 # ISO 8601 with a UTC offset
    gpu: str                  # the GPU's name, or "cpu"
    libraries: dict[str, str] = field(default_factory=dict)  # torch and each backend's library/version
    kind: str = "kernel"      # kernel, e2e, replay or atlas
    configurations: str = ""  # a digest of the row keys it measured: two suites at one commit stay apart
    rows: int = 0
    source: str = ""          # the run directory as given to `history add`
    command: str = ""         # the command that made the run (env.json)
    files: tuple[str, ...] = FILED

    def key(self) -> tuple:
        return (self.commit, self.date, self.gpu, json.dumps(self.libraries, sort_keys=True), self.kind,
                self.configurations)

    def when(self) -> dt.datetime:
        return parse_date(self.date, "date")


def parse_date(text: str, where: str) -> dt.datetime:
    """An ISO 8601 date or time; one without an offset is taken as UTC."""
    try:
        when = dt.datetime.fromisoformat(str(text).strip().replace("Z", "+00:00"))
    except ValueError:
        raise AttnbenchError(f"{where}: {text!r} is not an ISO 8601 date or time (2026-12-01T20:00:00+00:00)") \
            from None
    return when if when.tzinfo else when.replace(tzinfo=dt.timezone.utc)


def filed_as_atlas(env: dict) -> bool:
    """An atlas's env.json holds its atlas record (its axes and refinement)."""
    return isinstance(env.get("atlas"), dict)


def run_kind(run: Run, env: dict) -> str:
    """The kind of run as the run says it: e2e rows; an atlas (its env.json's atlas record, or the
    cell columns only an atlas's rows have); a replay (bucket rows); else a kernel sweep."""
    if run.kind is E2E:
        return "e2e"
    if filed_as_atlas(env) or any(c in run.rows.columns for c in CELL_COLUMNS):
        return "atlas"
    return "replay" if "bucket" in run.rows.columns else "kernel"


def configurations_digest(run: Run) -> str:
    keys = sorted("|".join(canonical(v) for v in row) for row in run.rows[list(run.kind.key)].itertuples(index=False))
    return hashlib.sha256("\n".join(keys).encode()).hexdigest()[:12]


def gpu_of(env: dict, run: Run) -> str:
    name = (env.get("gpu") or {}).get("name")  # read_env has checked gpu is an object or null
    if name:
        return str(name)
    seen = sorted({str(g) for g in run.rows["gpu"].dropna() if str(g).strip()}) if "gpu" in run.rows else []
    return seen[0] if env.get("gpu") is None and seen and seen[0] != "cpu" else "cpu"


def libraries_of(env: dict) -> dict[str, str]:
    found = {"torch": env.get("torch")} if env.get("torch") else {}
    found.update({name: str(v) for name, v in sorted((env.get("backend_libraries") or {}).items())})
    return {name: str(v) for name, v in found.items()}


def new_entry(run: Run, env: dict, source: Path, commit: str | None, date: str | None) -> Entry:
    """The entry for a run: the commit and date given (CI passes them), else env.json's."""
    commit = (commit or env.get("git_sha") or "").strip()
    if not commit:
        raise AttnbenchError(f"RUN: {source}/env.json records no git commit (git_sha); give --commit")
    if not (date or env.get("timestamp")):
        raise AttnbenchError(f"RUN: {source}/env.json records no timestamp; give --date")
    when = parse_date(date, "--date") if date else parse_date(env["timestamp"], f"RUN: {source}/env.json timestamp")
    stamp = when.astimezone(dt.timezone.utc).isoformat(timespec="seconds")
    entry = Entry("", commit, stamp, gpu_of(env, run), libraries_of(env), run_kind(run, env),
                  configurations_digest(run), len(run.rows), str(source), str(env.get("command") or ""),
                  (*FILED, *(name for name in OPTIONAL if (source / name).is_file())))
    digest = hashlib.sha256(repr(entry.key()).encode()).hexdigest()[:8]
    ident = f"{when.astimezone(dt.timezone.utc):%Y%m%dT%H%M%S}-{safe(commit)[:12]}-{digest}"
    return replace(entry, id=ident)


def safe(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in text)


# ---- the index ---------------------------------------------------------------------------------------

def read_index(history: Path, flag: str = "--history") -> list[Entry]:
    """HISTORY/index.json's entries, checked; [] for a history not made yet; errors start with `flag`."""
    path = history / INDEX
    if not path.exists():
        return []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise AttnbenchError(f"{flag}: {path} is not a readable JSON file ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries"), list):
        raise AttnbenchError(f"{flag}: {path} is not an attnbench history index (format {FORMAT!r} with entries)")
    return [entry_from(item, path, number, flag) for number, item in enumerate(data["entries"], 1)]


def entry_from(item: object, path: Path, number: int, flag: str) -> Entry:
    names = {f.name: f for f in fields(Entry)}
    if not isinstance(item, dict) or not {"id", "commit", "date", "gpu"} <= set(item):
        raise AttnbenchError(f"{flag}: {path} entry {number} is not an entry (id, commit, date, gpu)")
    known = {k: v for k, v in item.items() if k in names}
    texts = [k for k in ("id", "commit", "date", "gpu", "kind") if k in known and not isinstance(known[k], str)]
    if texts or not isinstance(known.get("libraries", {}), dict) or not isinstance(known.get("files", []), list):
        raise AttnbenchError(f"{flag}: {path} entry {number}: {texts[0] if texts else 'libraries or files'} "
                             "has the wrong type")
    if safe(known["id"]) != known["id"] or known["id"] in ("", ".", ".."):
        raise AttnbenchError(f"{flag}: {path} entry {number}: id {known['id']!r} is not a directory name")
    parse_date(known["date"], f"{flag}: {path} entry {number} date")
    return Entry(**{**known, "files": tuple(known.get("files", FILED))})


def index_text(entries: list[Entry]) -> str:
    return json.dumps({"format": FORMAT, "entries": [asdict(e) for e in entries]}, indent=1) + "\n"


def load_entry(history: Path, entry: Entry) -> Run:
    """An entry's rows for drawing. `history add` checked the whole file through read.load_run (about
    0.3 s a run); here only what the dashboard computes with is checked again: the file reads as
    a results table of one kind, with its key, and every timed row has a positive, finite time."""
    source = history / RUNS / entry.id / "results.csv"
    where = f"HISTORY: entry {entry.id}"
    try:
        rows = load_results(source)
        kind = kind_of(rows, source)
    except AttnbenchError as exc:
        raise AttnbenchError(f"{where}: {exc}") from None
    missing = [c for c in (*kind.key, "verdict", kind.measure) if c not in rows.columns]
    if missing:
        raise AttnbenchError(f"{where}: {source} lacks column(s) {', '.join(missing)}")
    rows = rows.assign(**{c: pd.to_numeric(rows[c], errors="coerce") for c in (kind.measure, *kind.spread) if c in rows})
    times = rows.loc[rows["verdict"].isin(MEASURED), kind.measure]
    if not (np.isfinite(times) & (times > 0)).all():
        raise AttnbenchError(f"{where}: {source} has a timed row whose {kind.measure} is not a positive number")
    return Run(source.parent, source, kind, rows)


def load_entry_env(history: Path, entry: Entry) -> dict:
    """An entry's env.json, read through the checked reader (what the dashboard names: a replay's
    trace, an atlas's axes)."""
    return read_env(history / RUNS / entry.id / "env.json", f"HISTORY: entry {entry.id}: env.json")


def in_order(entries: list[Entry]) -> list[Entry]:
    """Oldest first: by date, then in the order filed."""
    return [e for _, _, e in sorted((e.when(), i, e) for i, e in enumerate(entries))]
