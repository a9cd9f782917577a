"""Bad `--resume` and `--force` inputs: one `error:` line, exit 1, and not one byte changed.

A resume refuses a directory made by another command or with other sweep flags (naming the
difference), duplicated or foreign rows, a lock or a kept file that is a directory, and a
scenario's sweep that cannot be resumed, before anything is removed: each case compares every
file of the directory, byte for byte, before and after. A write that fails mid-run (the directory
made read-only) ends in one error line and keeps the rows already measured; this machine runs the
tests as root, which ignores file modes, so the read-only directory is simulated by making every
create, rename and unlink inside it raise PermissionError (`read_only`), as the kernel would.
`--force` removes only what the run recorded: the user's files beside it survive.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
from bad_input_cli import E2E, KERNEL, SETTINGS, assert_one_error_line, invoke
from hypothesis import given
from hypothesis import strategies as st

from attnbench.e2e import runner as e2e_runner
from attnbench.kernels import sweep
from attnbench.runs.rundir import LOCK, RECORD

# a flag of the kernel sweep each, changed: the resume must be refused naming it
KERNEL_CHANGES = {
    "--heads": ["8"], "--dim": ["64"], "--kv-heads": ["2"], "--tokens": ["8"], "--kind": ["mixed"],
    "--strategy": ["unified"], "--dtype": ["fp16"], "--causal": ["--no-causal"], "--cold-l2": ["--cold-l2"],
    "--budget-ms": ["6"], "--shard": ["1/2"], "--block-size": ["32"], "--seed": ["1"], "--context": ["64"],
    "--replicates": ["2"], "--decode-share": ["0.25"], "--spec-k": ["2"], "--prefill-len": ["256"],
    "--rel-spread": ["0.02"], "--prefix-ratio": ["0.25"],
}
E2E_CHANGES = {
    "--batch-size": ["1,3"], "--iters": ["2"], "--warmup": ["1"], "--strategy": ["unified"], "--dtype": ["fp16"],
    "--seed": ["1"], "--input-len": ["6"], "--output-len": ["3"], "--block-size": ["32"], "--chunk-size": ["8"],
}


def files_of(path: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) under path, dotfiles included."""
    return {str(p.relative_to(path)): None if p.is_dir() else p.read_bytes() for p in sorted(path.rglob("*"))}


def changed(argv: list[str], flag: str, value: list[str]) -> list[str]:
    """argv with `flag` given `value` (a switch such as --no-causal is its own value)."""
    if value[0].startswith("--"):
        return [*argv, *value]
    if flag in argv:
        i = argv.index(flag)
        return [*argv[:i + 1], *value, *argv[i + 2:]]
    return [*argv, flag, *value]


KERNEL_RUN = changed(KERNEL, "--tokens", ["8,16"])
E2E_RUN = changed(E2E, "--batch-size", ["1,2"])


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """One finished kernel run and one e2e run; each test works on a copy."""
    root = tmp_path_factory.mktemp("made")
    for name, argv in (("kernel", KERNEL_RUN), ("e2e", E2E_RUN)):
        result = invoke(*argv, "--out", root / name)
        assert result.exit_code == 0, result.output
    return {"kernel": root / "kernel", "e2e": root / "e2e"}


@pytest.fixture
def copy(made, tmp_path):
    def copy(kind: str) -> Path:
        return Path(shutil.copytree(made[kind], tmp_path / kind))
    return copy


def refused(out: Path, argv: list[str], named: str = "") -> str:
    """Run argv; it must end in one error line naming `named` and leave `out` byte for byte as it was."""
    before = files_of(out)
    line = assert_one_error_line(invoke(*argv), named)
    assert files_of(out) == before, line
    return line


@pytest.mark.parametrize("flag", KERNEL_CHANGES)
def test_kernel_resume_with_another_sweep_flag_is_refused_naming_it(copy, flag):
    out = copy("kernel")
    line = refused(out, [*changed(KERNEL_RUN, flag, KERNEL_CHANGES[flag]), "--resume", out], named=flag)
    assert "there" in line and "here" in line


@pytest.mark.parametrize("flag", E2E_CHANGES)
def test_e2e_resume_with_another_sweep_flag_is_refused_naming_it(copy, flag):
    out = copy("e2e")
    refused(out, [*changed(E2E_RUN, flag, E2E_CHANGES[flag]), "--resume", out], named=flag)


@SETTINGS
@given(st.lists(st.sampled_from(sorted(KERNEL_CHANGES)), min_size=1, max_size=4, unique=True))
def test_any_set_of_changed_flags_is_refused_naming_one_of_them(copy, tmp_path, flags):
    out = tmp_path / "kernel"
    if not out.exists():
        out = copy("kernel")
    argv = KERNEL_RUN
    for flag in flags:
        argv = changed(argv, flag, KERNEL_CHANGES[flag])
    before = files_of(out)
    result = invoke(*argv, "--resume", out)
    line = assert_one_error_line(result)
    assert any(f"{flag} " in line or f"{flag}," in line or flag[2:] in line for flag in flags), (flags, line)
    assert files_of(out) == before


@pytest.mark.parametrize("command, other", [(KERNEL_RUN, "e2e"), (E2E_RUN, "kernel")], ids=["kernel", "e2e"])
def test_a_run_of_another_command_is_refused_naming_it(copy, command, other):
    out = copy(other)
    refused(out, [*command, "--resume", out], named=f"made by `attnbench {other}`")


def edit_env(out: Path, **changes) -> None:
    env = json.loads((out / "env.json").read_text())
    env.update(changes)
    env = {k: v for k, v in env.items() if v is not None}
    (out / "env.json").write_text(json.dumps(env))


def test_a_run_from_before_the_sweep_record_is_judged_by_its_rows(copy):
    out = copy("kernel")
    edit_env(out, sweep=None)
    refused(out, [*changed(KERNEL_RUN, "--heads", ["8"]), "--resume", out], named="--heads 4")
    refused(out, [*changed(KERNEL_RUN, "--strategy", ["unified"]), "--resume", out], named="--strategy split")
    refused(out, [*KERNEL_RUN, "--shard", "0/2", "--resume", out], named="which this sweep does not measure")
    e2e = copy("e2e")
    edit_env(e2e, sweep=None)
    refused(e2e, [*KERNEL_RUN, "--resume", e2e], named="made by `attnbench e2e`")
    refused(e2e, [*changed(E2E_RUN, "--batch-size", ["1"]), "--resume", e2e], named="--batch-size 2")


@pytest.mark.parametrize("record", ["a string", {"command": "kernel"}, {"command": "kernel", "flags": [1]}])
def test_a_damaged_sweep_record_is_refused(copy, record):
    out = copy("kernel")
    edit_env(out, sweep=record)
    refused(out, [*KERNEL_RUN, "--resume", out], named="sweep record")


def test_an_e2e_env_with_wrong_types_is_refused(copy):
    out = copy("e2e")
    edit_env(out, sweep=None, e2e="not a table")
    refused(out, [*E2E_RUN, "--resume", out], named="env.json: e2e is the string")


def test_duplicated_rows_are_refused_not_kept(copy):
    out = copy("kernel")
    text = (out / "results.csv").read_text()
    (out / "results.csv").write_text(text + text.splitlines(keepends=True)[1])
    refused(out, [*KERNEL_RUN, "--resume", out], named="measure the same configuration")
    e2e = copy("e2e")
    text = (e2e / "results.csv").read_text()
    (e2e / "results.csv").write_text(text + text.splitlines(keepends=True)[-1])
    refused(e2e, [*E2E_RUN, "--resume", e2e], named="measure the same configuration")


def test_a_row_of_the_wrong_type_or_of_the_other_kind_is_refused(copy):
    out = copy("kernel")
    lines = (out / "results.csv").read_text().splitlines(keepends=True)
    (out / "results.csv").write_text(lines[0] + lines[1].replace("decode,8,", "decode,eight,", 1))
    refused(out, [*KERNEL_RUN, "--resume", out], named="num_tokens")
    swapped = copy("e2e")
    shutil.copy(out.parent / "kernel" / "env.json", swapped / "env.json")  # a kernel env over e2e rows
    refused(swapped, [*KERNEL_RUN, "--resume", swapped], named="an e2e run")


@pytest.mark.parametrize("name", ["results.csv", "env.json", "agreement.csv", "telemetry.csv"])
def test_a_directory_where_resume_expects_a_file_is_refused(copy, name):
    out = copy("e2e")
    (out / name).unlink(missing_ok=True)
    (out / name).mkdir()
    (out / name / "inside.txt").write_text("the user's")
    refused(out, [*E2E_RUN, "--resume", out], named=f"{name} is a directory")


@pytest.mark.parametrize("spoil, named", [
    (lambda out: (out / "env.json").write_text("[1, 2]"), "env.json holds JSON list, not an object"),
    (lambda out: (out / "env.json").write_bytes(b"\xff\x00{"), "env.json is not a readable JSON file"),
    (lambda out: ((out / "results.csv").rename(out.parent / "elsewhere.csv"),
                  (out / "results.csv").symlink_to(out.parent / "elsewhere.csv")), "results.csv"),
], ids=["env-list", "env-binary", "results-link"])
def test_an_unreadable_env_or_a_linked_results_file_is_refused(copy, spoil, named):
    out = copy("kernel")
    spoil(out)
    outside = files_of(out.parent)
    refused(out, [*KERNEL_RUN, "--resume", out], named=named)
    assert files_of(out.parent) == outside  # a link's target too


@pytest.mark.parametrize("how", ["--resume", "--force", "--out"])
def test_a_lock_that_is_a_directory_is_refused(copy, how):
    out = copy("kernel")
    (out / LOCK).mkdir()
    argv = [*KERNEL_RUN, "--out", out, "--force"] if how == "--force" else [*KERNEL_RUN, how, out]
    refused(out, argv, named="not attnbench's lock file" if how != "--out" else "")


@pytest.mark.parametrize("how", ["--resume", "--force"])
def test_a_live_runs_directory_is_refused_before_anything_is_removed(copy, how):
    out = copy("kernel")
    (out / LOCK).write_text(str(os.getppid()))  # a live process that is not this one
    argv = [*KERNEL_RUN, "--resume", out] if how == "--resume" else [*KERNEL_RUN, "--out", out, "--force"]
    refused(out, argv, named="another attnbench run")


# -- a scenario of several contexts -------------------------------------------------------------------

TWO_CONTEXTS = ('command = "kernel"\nheads = 4\ndim = 32\ntokens = [8]\ncontext = [32, 64]\nkind = "decode"\n'
                'budget_ms = 5\nbackend = "reference"\ndevice = "cpu"\n')


@pytest.fixture(scope="module")
def scenario_run(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("scenario")
    (root / "two.toml").write_text(TWO_CONTEXTS)
    result = invoke("run", root / "two.toml", "--out", root / "run")
    assert result.exit_code == 0, result.output
    return root / "two.toml", root / "run"


@pytest.mark.parametrize("spoil, named", [
    (lambda out: edit_env(out / "context-64", torch="0.0.1"), "torch"),
    (lambda out: shutil.copytree(out / "context-64", out / "context-128"), "context-128/"),
    (lambda out: (out / "context-64" / "results.csv").write_bytes(b"\xff\xfe\x00k"), "context-64"),
], ids=["other-torch", "other-context", "binary-results"])
def test_a_refused_scenario_resume_keeps_the_merged_outputs(scenario_run, tmp_path, spoil, named):
    toml, made_run = scenario_run
    out = Path(shutil.copytree(made_run, tmp_path / "run"))
    spoil(out)
    refused(out, ["run", toml, "--resume", out], named=named)
    assert (out / "results.csv").is_file() and (out / "summary.md").is_file() and any(out.glob("*.png"))


def test_a_scenario_resume_with_another_flag_is_refused(scenario_run, tmp_path):
    toml, made_run = scenario_run
    out = Path(shutil.copytree(made_run, tmp_path / "run"))
    refused(out, ["run", toml, "--resume", out, "--heads", "8"], named="--heads 4 there, 8 here")


# -- a directory made read-only mid-run ---------------------------------------------------------------

def read_only(monkeypatch, out: Path) -> None:
    """From now on, creating, renaming or removing an entry of `out` fails as in a read-only
    directory (root ignores file modes, so chmod would not do it here)."""
    real_open, real_replace, real_unlink = os.open, os.replace, os.unlink

    def inside(path) -> bool:
        return Path(os.fsdecode(path)).parent == out

    def denied(path):
        return PermissionError(errno.EACCES, "Permission denied", os.fsdecode(path))

    def open_(path, flags, *args, **kwargs):
        if flags & os.O_CREAT and inside(path) and not Path(os.fsdecode(path)).exists():
            raise denied(path)
        return real_open(path, flags, *args, **kwargs)

    def replace(src, dst, *args, **kwargs):
        if inside(dst):
            raise denied(src)
        return real_replace(src, dst, *args, **kwargs)

    def unlink(path, *args, **kwargs):
        if inside(path):
            raise denied(path)
        return real_unlink(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_)
    monkeypatch.setattr(os, "replace", replace)
    monkeypatch.setattr(os, "unlink", unlink)


def one_error_after_output(result) -> str:
    crashed = result.exception if not isinstance(result.exception, SystemExit) else None
    assert crashed is None, f"{type(crashed).__name__}: {crashed}"
    assert result.exit_code == 1 and "Traceback" not in result.output, result.output
    errors = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and errors[0].startswith("error: "), result.stderr
    return errors[0]


def test_kernel_output_dir_made_read_only_mid_run_keeps_its_rows(tmp_path, monkeypatch):
    out, real, calls = tmp_path / "run", sweep.PointRunner.rows, []

    def rows(self):
        calls.append(self.point)
        if len(calls) == 2:
            read_only(monkeypatch, out)
        yield from real(self)

    monkeypatch.setattr(sweep.PointRunner, "rows", rows)
    result = invoke(*KERNEL_RUN, "--out", out)
    monkeypatch.undo()
    line = one_error_after_output(result)
    assert "Permission denied" in line and "cannot write" in line, line
    assert len(pd.read_csv(out / "results.csv")) == 4  # both points, both strategies
    assert not list(out.glob(".*.tmp"))


def test_e2e_output_dir_made_read_only_mid_run_keeps_the_points_saved(tmp_path, monkeypatch):
    out, real, calls = tmp_path / "run", e2e_runner.run_point, []

    def run_point(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            read_only(monkeypatch, out)
        return real(*args, **kwargs)

    monkeypatch.setattr("attnbench.runs.e2e.run_point", run_point)
    result = invoke(*E2E_RUN, "--out", out)
    monkeypatch.undo()
    line = one_error_after_output(result)
    assert "cannot write results.csv" in line and "Permission denied" in line, line
    kept = pd.read_csv(out / "results.csv")
    assert set(kept["batch_size"]) == {1} and len(kept) == 2  # the first point, both strategies
    assert (out / LOCK).exists()  # left behind by the read-only directory; the next run takes it over
    result = invoke(*E2E_RUN, "--resume", out)
    assert result.exit_code == 0, result.output
    assert set(pd.read_csv(out / "results.csv")["batch_size"]) == {1, 2}


def test_a_lock_that_cannot_be_made_is_one_error(copy, monkeypatch):
    out = copy("kernel")
    before = files_of(out)
    read_only(monkeypatch, out)
    result = invoke(*KERNEL_RUN, "--resume", out)
    monkeypatch.undo()
    assert_one_error_line(result, "cannot write .attnbench.lock")
    assert files_of(out) == before


# -- --force beside the user's files ------------------------------------------------------------------

USERS = {"notes.png": b"my plot", "profile/trace.json": b"{}", "context-mine/x.csv": b"a\n", ".x.tmp": b"tmp",
         "scenario.json": b'{"mine": 1}', "telemetry.csv": b"t\n1\n"}


def add_users_files(out: Path) -> None:
    for name, data in USERS.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)


def assert_users_files(out: Path) -> None:
    assert {name: (out / name).read_bytes() for name in USERS} == USERS
    assert not set(USERS) & set(json.loads((out / RECORD).read_text())["written"])


@pytest.mark.parametrize("kind", ["kernel", "e2e"])
def test_force_beside_the_users_files_keeps_them(copy, kind):
    out = copy(kind)
    (out / "telemetry.csv").unlink(missing_ok=True)
    (out / "scenario.json").unlink(missing_ok=True)
    add_users_files(out)
    result = invoke(*(KERNEL_RUN if kind == "kernel" else E2E_RUN), "--out", out, "--force")
    assert result.exit_code == 0, result.output
    assert_users_files(out)


def test_a_scenario_with_force_keeps_the_users_files_and_its_own_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "run"
    toml = tmp_path / "mine.toml"
    toml.write_text('command = "kernel"\nheads = 4\ndim = 32\ntokens = [8]\ncontext = 32\nkind = "decode"\n'
                    'budget_ms = 5\nbackend = "reference"\ndevice = "cpu"\nout = "run"\nforce = true\n')
    assert invoke("run", toml).exit_code == 0
    toml = toml.rename(out / "mine.toml")  # the scenario, an input of the command, inside its own output directory
    (out / "scenario.json").unlink()
    add_users_files(out)
    result = invoke("run", toml)
    assert result.exit_code == 0, result.output
    assert toml.is_file() and (out / "results.csv").is_file()
    assert {name: (out / name).read_bytes() for name in USERS if name != "scenario.json"} == \
        {k: v for k, v in USERS.items() if k != "scenario.json"}

