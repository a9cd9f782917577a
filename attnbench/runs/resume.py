"""What `--resume` checks before it changes anything: the same command, the same sweep, rows it can keep.

Why: a resume used to trust the directory. `kernel --resume` on an e2e run rewrote its results.csv
with kernel columns only; other heads, strategies or dtype mixed two sweeps in one results.csv or
dropped the rows the new flags did not ask for; duplicated rows were kept. Now every run records
its command and the flags that define its sweep in env.json (`sweep`), and a resume compares them
with its own, refusing in one line that names the first difference, before any file is touched.
Flags that say where or how a sweep runs (EXECUTION_FLAGS: --isolate, --device, --json, ...) may
differ. A directory from before the record is judged by its files: env.json says which command
made it, and every row of results.csv must be one this sweep would measure (check_foreign).
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

from attnbench.errors import AttnbenchError, UsageError
from attnbench.results import shards
from attnbench.results.read import load_run
from attnbench.runs.rundir import ResumeKey, RunDir

# the flags a resume may change: where and how points run (results/shards.py, as merge reads them), by field name
EXECUTION_FLAGS = frozenset(flag[2:].replace("-", "_") for flag in shards.EXECUTION_FLAGS)
# results.csv columns named otherwise than their flag
COLUMN_FLAGS = {"num_heads": "--heads", "head_dim": "--dim", "num_kv_heads": "--kv-heads", "num_tokens": "--tokens",
                "input_len": "--input-len", "output_len": "--output-len"}


def flag_text(value) -> str:
    """A flag's value as env.json's `sweep` keeps it: a list comma-separated in its order (e2e zips
    its lengths), a shape as 32x128, a whole float as an int (a scenario's 5 is the command line's 5.0)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, tuple)):  # a shape of --shapes is a tuple in the list
        return ",".join("x".join(map(str, v)) if isinstance(v, tuple) else flag_text(v) for v in value)
    return str(getattr(value, "value", value))


def sweep_record(command: str, args, resolved: dict, leave_out: tuple[str, ...] = ()) -> dict:
    """env.json's `sweep`: the command, and every flag of `args` (a KernelArgs or E2EArgs) but the
    execution ones and `leave_out`, as text; `resolved` holds the values the run chose for flags left out."""
    flags = {f"--{f.name.replace('_', '-')}": flag_text(resolved.get(f.name, getattr(args, f.name)))
             for f in fields(args) if f.name not in EXECUTION_FLAGS and f.name not in leave_out}
    return {"command": command, "flags": flags}


def made_by(env: dict) -> str:
    """The command that made a run: its record, or (an env.json from before it) whether it has `e2e`."""
    record = env.get("sweep")
    if isinstance(record, dict) and isinstance(record.get("command"), str):
        return record["command"]
    return "e2e" if "e2e" in env else "kernel"


def _shown(flag: str, text, named: bool) -> str:
    """A recorded value as the user would type it: `--heads 32` (`32` if not `named`), `--no-causal`."""
    if text is None:
        return f"{flag} not recorded" if named else "not recorded"
    if text in ("true", "false"):
        return flag if text == "true" else f"--no-{flag[2:]}"
    if not text:
        return f"no {flag}" if named else "none"
    return f"{flag} {text}" if named else text


def check_resume(run: RunDir, env: dict, rows_kind: str | None = None) -> tuple[dict, list[dict]]:
    """Everything a resume into `run` must agree with, before anything there changes: the machine
    and libraries, the command and sweep flags, results.csv's kind (`rows_kind`, default the
    command's: a replay's rows are kernel rows) and rows. (old env, the rows as text)."""
    old_env = run.read_env()
    run.check_resumable(old_env, env)
    check_same_sweep(run.path, old_env, env)
    rows = run.read_rows()
    if rows:  # none: stopped before its first point
        check_rows(run.path, rows_kind or env["sweep"]["command"])
    return old_env, rows


def check_same_sweep(path: Path, old_env: dict, new_env: dict) -> None:
    """Refuse a directory made by another command or with other sweep flags, naming the first difference."""
    new = new_env["sweep"]
    old_command = made_by(old_env)
    if old_command != new["command"]:
        raise UsageError(f"--resume {path}: it was made by `attnbench {old_command}`, not {new['command']}; "
                         f"resume it with `attnbench {old_command}` or start a new directory")
    old = old_env.get("sweep")
    if old is None:
        return  # made before the record: its rows are checked instead (check_foreign)
    flags = old.get("flags") if isinstance(old, dict) else None
    if not isinstance(flags, dict):
        raise UsageError(f"--resume {path}: env.json's sweep record is damaged (no flags); start a new directory")
    for flag in [*new["flags"], *(f for f in flags if f not in new["flags"])]:
        there, here = flags.get(flag), new["flags"].get(flag)
        if there != here:
            raise UsageError(f"--resume {path}: {_shown(flag, there, True)} there, {_shown(flag, here, False)} here; "
                             "resume with the flags it was made with (env.json's command) or start a new directory")


def check_rows(path: Path, command: str) -> None:
    """results.csv holds rows of `command`'s kind, of the right types, one per configuration."""
    try:
        run = load_run(path / "results.csv", "--resume")
    except AttnbenchError as exc:
        raise UsageError(f"{exc}; fix or remove the row, or start a new directory") from None
    if run.kind.name != command:
        raise UsageError(f"--resume {path}: its results.csv is {run.kind.describe()}, not {command}; resume it "
                         f"with `attnbench {run.kind.name}` or start a new directory")


def check_foreign(path: Path, rows: list[dict], key: ResumeKey, allowed: set[tuple[str, ...]],
                  choices: dict[str, set[str]]) -> None:
    """Refuse a row that is not one of `allowed` points (by `key`) with a value of `choices` in each
    other column (blank: a point that failed as a whole), naming the flag that differs: resuming
    would drop it or mix two sweeps (a directory from before the sweep record, or edited rows)."""
    columns = key.columns
    values = [{point[i] for point in allowed} for i in range(len(columns))]
    for number, row in enumerate(rows, 1):
        point = key.of(row)
        if point not in allowed:
            column = next((c for c, v, s in zip(columns, point, values) if v not in s), None)
            what = f"{COLUMN_FLAGS.get(column, '--' + column.replace('_', '-'))} {point[columns.index(column)]}" \
                if column else "a point"
            raise _foreign(path, number, what)
        for column, allowed_values in choices.items():
            value = row.get(column) or ""
            if value and not set(value.split(",")) <= allowed_values:
                raise _foreign(path, number, f"--{column} {value}")


def _foreign(path: Path, number: int, what: str) -> UsageError:
    return UsageError(f"--resume {path}: results.csv row {number} has {what}, which this sweep does not measure; "
                      "resume with the flags it was made with or start a new directory")
