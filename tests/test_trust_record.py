"""A results folder is not believed: its record is checked, --force removes only what a valid record
names, a command never removes its own inputs, and nothing is written through a link under --out.

Every command that writes a run is handed an --out whose `.attnbench-files.json` names
`../victim.txt`, an absolute path or a folder outside (with --force, and with --resume where the
command has one), and an --out that holds the user's files but no record: each must end in one
`error:` line, exit 1, with the files outside and inside the folder byte for byte as they were. A
hypothesis test builds random records (names with `..`, `/`, absolute paths, links, unicode, non-
strings, nested values, bytes that are no JSON) and checks that nothing outside the folder is ever
touched, and that a valid record's entries, only those, are removed.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from bad_input_cli import E2E, KERNEL, SCENARIO, assert_one_error_line, invoke
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnbench.errors import UsageError
from attnbench.runs.rundir import LOCK, RECORD, RunDir
from attnbench.traces.jsonl import trace_text
from attnbench.traces.steps import Header, Request, Shape, Trace, TraceStep

REQUESTS = "".join(json.dumps({"timestamp": t, "input_length": 6, "output_length": 2}) + "\n" for t in (0.0, 0.1))
ATLAS = ["atlas", "--decode-share", "0.5", "--decode-context", "16", "--chunk", "8", "--head-dim", "32",
         "--gqa-group", "4", "--heads", "8", "--tokens", "4:8:2", "--budget-ms", "2", "--device", "cpu"]
AB_KERNEL = ["--heads", "2", "--dim", "16", "--tokens", "4", "--context", "16", "--kind", "decode", "--device", "cpu",
             "--budget-ms", "5", "--backend", "reference"]
REPLAY_FAST = ["--budget-ms", "2", "--device", "cpu", "--bucket-ratio", "2"]
USERS = {"holiday.png": b"png", "profile/trace.json": b"{}", "context-notes/a.txt": b"a", ".draft.tmp": b"t",
         "summary.md": b"# mine\n", "index.html": b"<p>mine</p>", "rule.py": b"MINE = 1\n"}


@pytest.fixture(autouse=True)
def confined(tmp_path_factory, monkeypatch):
    """Every removal these tests cause must stay under pytest's temporary folder: one outside is
    refused (not performed) and fails the test. These tests hand crafted records to the code that
    deletes; on code that believed a record, `{"written": ["/"]}` was `rmtree("/")` (it emptied a
    machine's /etc once), so a regression must fail here, not run."""
    base = Path(tmp_path_factory.getbasetemp()).resolve()

    def inside(path, dir_fd=None) -> bool:
        path = os.fsdecode(path)
        if dir_fd is not None and not os.path.isabs(path):
            path = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), path)
        parent = Path(os.path.abspath(path)).parent.resolve()  # the entry itself is not followed
        return parent == base or base in parent.parents

    def guard(name, real):
        def removal(path, *args, dir_fd=None, **kwargs):
            if not inside(path, dir_fd):
                raise AssertionError(f"{name}({path!r}) outside the test's folder {base}: refused")
            return real(path, *args, **({"dir_fd": dir_fd} if dir_fd is not None else {}), **kwargs)
        return removal

    for name in ("unlink", "remove", "rmdir"):
        monkeypatch.setattr(os, name, guard(f"os.{name}", getattr(os, name)))
    monkeypatch.setattr(shutil, "rmtree", guard("shutil.rmtree", shutil.rmtree))


def write_step_trace(path: Path) -> Path:
    rows = [[(1, 9), (1, 30)], [(1, 40), (8, 8)], [(12, 12)], [(1, 7), (1, 9), (1, 60)]]
    steps = tuple(TraceStep(tuple(Request(q, kv) for q, kv in step)) for step in rows)
    path.write_text(trace_text(Trace(Header("test", Shape(2, 1, 16)), steps)))
    return path


@pytest.fixture(scope="module")
def made(tmp_path_factory) -> dict[str, Path]:
    """The inputs the commands read: a step trace, a request trace, a replay run to fit a rule on,
    two kernel shards to merge, a history, a scenario file and a kernel run to plot."""
    from history_fixtures import make_history
    from rule_fixtures import write_run

    root = tmp_path_factory.mktemp("inputs")
    (root / "requests.jsonl").write_text(REQUESTS)
    (root / "k.toml").write_text(SCENARIO + 'budget_ms = 5\nbackend = "reference"\ndevice = "cpu"\n')
    for name, extra in (("s0", ["--shard", "0/2"]), ("s1", ["--shard", "1/2"]), ("kernel", [])):
        result = invoke(*KERNEL, "--tokens", "4,8", *extra, "--out", root / name)
        assert result.exit_code == 0, result.output
    return {"trace": write_step_trace(root / "t.jsonl"), "requests": root / "requests.jsonl",
            "rule_run": write_run(root / "rule-run"), "s0": root / "s0", "s1": root / "s1",
            "history": make_history(root / "h", runs=3, step_at=1)[0], "toml": root / "k.toml",
            "kernel": root / "kernel"}


# the commands that write a run: (argv before --out/--resume, whether it has --resume)
COMMANDS = {
    "kernel": (lambda m: KERNEL, True),
    "e2e": (lambda m: E2E, True),
    "e2e --trace": (lambda m: ["e2e", "--device", "cpu", "--trace", m["requests"]], False),
    "replay": (lambda m: ["replay", m["trace"], *REPLAY_FAST], True),
    "atlas": (lambda m: ATLAS, True),
    "rule fit": (lambda m: ["rule", "fit", m["rule_run"]], False),
    "ab": (lambda m: ["ab", "--baseline", "AB_SIDE=a", "--candidate", "AB_SIDE=b", *AB_KERNEL], False),
    "dashboard": (lambda m: ["dashboard", m["history"]], False),
    "merge": (lambda m: ["merge", m["s0"], m["s1"]], False),
    "trace to-flashinfer-bench": (lambda m: ["trace", "to-flashinfer-bench", m["trace"]], False),
    "scenario run": (lambda m: ["run", m["toml"]], True),
}
CRAFTED = {"../victim.txt": lambda t: "../victim.txt", "absolute": lambda t: str(t / "victim.txt"),
           "folder outside": lambda t: "../outside"}
CASES = [(c, how, r) for c, (_, resumable) in COMMANDS.items() for how in ("--force", "--resume")
         if how == "--force" or resumable for r in CRAFTED]


def files_of(path: Path) -> dict[str, bytes | str | None]:
    """Every entry under path: a file's bytes, a link's target, a folder None (links not followed)."""
    found = {}
    for root, dirs, names in os.walk(path):
        for name in dirs + names:
            entry = Path(root) / name
            key = str(entry.relative_to(path))
            found[key] = os.readlink(entry) if entry.is_symlink() else None if entry.is_dir() else entry.read_bytes()
    return found


def a_run_folder(tmp_path: Path, record: bytes | None) -> tuple[Path, Path]:
    """tmp/run with results.csv, env.json, summary.md and `record`; beside it the victims: tmp/victim.txt
    and tmp/outside/ (a folder with a file). (run, tmp)."""
    out = tmp_path / "run"
    out.mkdir()
    (tmp_path / "victim.txt").write_text("the user's\n")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "keep.txt").write_text("kept\n")
    for name in ("results.csv", "env.json", "summary.md"):
        (out / name).write_text("x\n")
    if record is not None:
        (out / RECORD).write_bytes(record)
    return out, tmp_path


@pytest.mark.parametrize("command, how, crafted", CASES)
def test_a_crafted_record_deletes_nothing_for_any_command(made, tmp_path, command, how, crafted):
    argv, _ = COMMANDS[command]
    name = CRAFTED[crafted](tmp_path)
    out, _ = a_run_folder(tmp_path, json.dumps({"written": ["summary.md", name]}).encode())
    before = files_of(tmp_path)
    target = ["--out", out, "--force"] if how == "--force" else ["--resume", out]
    assert_one_error_line(invoke(*argv(made), *target), "is not a record attnbench wrote")
    assert files_of(tmp_path) == before


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_force_without_a_record_removes_and_overwrites_nothing(made, tmp_path, command):
    argv, _ = COMMANDS[command]
    out = tmp_path / "mine"
    for name, data in USERS.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    before = files_of(tmp_path)
    assert_one_error_line(invoke(*argv(made), "--out", out, "--force"), "no record of what attnbench wrote")
    assert files_of(tmp_path) == before


@pytest.mark.parametrize("record", [
    b"\xff\xfe{", b'{"written": ["summary.md"', b'["summary.md"]', b'{"written": [1]}', b'{"written": [["a"]]}',
    b'{"written": "summary.md"}', b'{"written": [{"a": 1}]}', b"[" * 100_000, b'{"written": ["."]}',
    b'{"written": [""]}', b'{"written": ["a/b"]}', b'{"written": [".attnbench.lock"]}', b'{"written": ["a\\u0000"]}',
    b'{"written": ["\\ud800"]}', json.dumps({"written": ["x" * 300]}).encode(), b"",
    b'{"written": [], "also": 1}', b'{"written": [null]}',
], ids=lambda r: r[:24].decode("utf-8", "replace"))
def test_a_garbage_record_is_one_line_and_nothing_is_removed(tmp_path, record):
    out, _ = a_run_folder(tmp_path, record)
    before = files_of(tmp_path)
    assert_one_error_line(invoke(*KERNEL, "--out", out, "--force"), "is not a record attnbench wrote")
    assert_one_error_line(invoke(*KERNEL, "--resume", out), "is not a record attnbench wrote")
    assert files_of(tmp_path) == before


@pytest.mark.parametrize("kind", ["link", "folder"])
def test_a_record_that_is_a_link_or_a_folder_is_refused(tmp_path, kind):
    out, _ = a_run_folder(tmp_path, None)
    if kind == "link":
        (tmp_path / "elsewhere.json").write_text(json.dumps({"written": ["summary.md"]}))
        (out / RECORD).symlink_to(tmp_path / "elsewhere.json")
    else:
        (out / RECORD).mkdir()
    before = files_of(tmp_path)
    assert_one_error_line(invoke(*KERNEL, "--out", out, "--force"), "is not a record attnbench wrote")
    assert files_of(tmp_path) == before


def test_a_valid_record_naming_a_link_unlinks_it_and_keeps_the_users_files(tmp_path):
    out, _ = a_run_folder(tmp_path, None)
    (out / "linked").symlink_to(tmp_path / "outside", target_is_directory=True)
    (out / "mine.txt").write_text("mine\n")
    (out / RECORD).write_text(json.dumps({"written": ["results.csv", "env.json", "summary.md", "linked"]}))
    result = invoke(*KERNEL, "--out", out, "--force")
    assert result.exit_code == 0, result.output
    assert not (out / "linked").is_symlink() and (tmp_path / "outside" / "keep.txt").read_text() == "kept\n"
    assert (out / "mine.txt").read_text() == "mine\n" and (tmp_path / "victim.txt").read_text() == "the user's\n"


def test_leftover_temporary_files_go_only_for_names_the_record_holds(tmp_path):
    out, _ = a_run_folder(tmp_path, json.dumps({"written": ["summary.md", "*", "[a]"]}).encode())
    for name in (".summary.md.abcd1234.tmp", ".env.json.abcd1234.tmp", ".draft.tmp", ".a.abcd1234.tmp"):
        (out / name).write_text("t")
    RunDir.prepare(out, force=True)
    left = {p.name for p in out.iterdir()}
    assert ".summary.md.abcd1234.tmp" not in left and "summary.md" not in left
    assert {".env.json.abcd1234.tmp", ".draft.tmp", ".a.abcd1234.tmp", "results.csv", "env.json"} <= left


def test_resume_without_a_record_writes_over_nothing_but_resumes_a_bare_run(made, tmp_path):
    out = Path(shutil.copytree(made["kernel"], tmp_path / "run"))
    (out / RECORD).unlink()
    before = files_of(out)
    assert_one_error_line(invoke(*KERNEL, "--tokens", "4,8", "--resume", out), "no record of what attnbench wrote")
    assert files_of(out) == before
    for entry in out.iterdir():
        if entry.name not in ("results.csv", "env.json"):
            entry.unlink()
    result = invoke(*KERNEL, "--tokens", "4,8", "--resume", out)
    assert result.exit_code == 0, result.output
    assert (out / "summary.md").is_file() and RECORD in {p.name for p in out.iterdir()}


def test_the_record_is_written_atomically(tmp_path, monkeypatch):
    run = RunDir.prepare(tmp_path / "run")
    run.record(run.path / "a.csv")
    real = os.replace

    def failing(src, dst, *args, **kwargs):
        if Path(dst).name == RECORD:
            raise OSError(28, "No space left on device", str(src))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OSError):
        run.record(run.path / "b.csv")
    monkeypatch.undo()
    assert json.loads((run.path / RECORD).read_text()) == {"written": ["a.csv"]}
    assert sorted(p.name for p in run.path.iterdir()) == [RECORD]  # the .attnbench-files.json.*.tmp is gone


# -- a command never removes its inputs ------------------------------------------------------------------

def recorded_copy(source: Path, dest: Path) -> Path:
    """A copy of a run whose record names every file of it, as a run attnbench wrote would."""
    shutil.copytree(source, dest)
    (dest / RECORD).write_text(json.dumps({"written": sorted(p.name for p in dest.iterdir())}))
    return dest


@pytest.mark.parametrize("where", ["the run itself", "its parent"])
def test_rule_fit_never_removes_the_run_it_fits_on(made, tmp_path, where):
    parent = tmp_path / "parent"
    parent.mkdir()
    run = recorded_copy(made["rule_run"], parent / "run")
    (parent / RECORD).write_text(json.dumps({"written": ["run"]}))  # as if a rule had been written there
    out = run if where == "the run itself" else parent
    before = files_of(parent)
    assert_one_error_line(invoke("rule", "fit", run, "--out", out, "--force"), "an input of this command")
    assert files_of(parent) == before
    (tmp_path / "link").symlink_to(run, target_is_directory=True)  # the same run, given through a link
    assert_one_error_line(invoke("rule", "fit", tmp_path / "link", "--out", out, "--force"), "an input of this command")
    assert files_of(parent) == before


@pytest.mark.parametrize("command", ["replay", "trace to-flashinfer-bench", "e2e --trace", "dashboard", "merge"])
def test_an_out_above_an_input_is_refused(made, tmp_path, command):
    out = tmp_path / "out"
    out.mkdir()
    inputs = {"replay": "trace", "trace to-flashinfer-bench": "trace", "e2e --trace": "requests",
              "dashboard": "history", "merge": "s0"}[command]
    moved = dict(made)
    source = made[inputs]
    moved[inputs] = (shutil.copytree if source.is_dir() else shutil.copy)(source, out / source.name)
    moved[inputs] = Path(moved[inputs])
    (out / RECORD).write_text(json.dumps({"written": [source.name]}))
    before = files_of(tmp_path)
    argv, _ = COMMANDS[command]
    assert_one_error_line(invoke(*argv(moved), "--out", out, "--force"), "an input of this command" if command != "merge"
                          else "one of the runs being merged")
    assert files_of(tmp_path) == before


# -- no write through a link under --out ---------------------------------------------------------------

@pytest.mark.parametrize("name", ["workloads", "blob"])
def test_flashinfer_bench_writes_nothing_through_a_link_in_out(made, tmp_path, name):
    out, outside = tmp_path / "fib", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    (out / name).symlink_to(outside, target_is_directory=True)
    (out / RECORD).write_text(json.dumps({"written": []}))  # valid, and it does not name the link
    assert_one_error_line(invoke("trace", "to-flashinfer-bench", made["trace"], "--out", out, "--force"), name)
    assert list(outside.iterdir()) == [] and (out / name).is_symlink()


def test_a_nul_byte_in_a_flashinfer_bench_tensor_path_is_one_line(tmp_path):
    line = {"definition": "gqa_paged_decode_h2_kv1_d16_ps1",
            "workload": {"uuid": "u", "axes": {}, "inputs": {"kv_indptr": {"type": "safetensors",
                                                                       "path": "blob/a\u0000b", "tensor_key": "k"}}}}
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps(line) + "\n")
    assert_one_error_line(invoke("trace", "convert", "--flashinfer-bench", path, "--out", tmp_path / "o.jsonl"),
                          "NUL")


def test_a_profile_link_in_out_is_refused_before_the_profiler_writes(tmp_path):
    out, outside = tmp_path / "run", tmp_path / "outside"
    out.mkdir()
    outside.mkdir()
    (out / "profile").symlink_to(outside, target_is_directory=True)
    (out / RECORD).write_text(json.dumps({"written": []}))
    assert_one_error_line(invoke(*KERNEL, "--profile", "--out", out, "--force"), "profile")
    assert list(outside.iterdir()) == []


# -- random records ---------------------------------------------------------------------------------------

NAMES = st.one_of(
    st.sampled_from(["..", ".", "", "/", "../victim.txt", "../outside", "outside", "a/b", "inner.txt", "inner",
                     "link-out", "link-file", LOCK, RECORD, "*", ".*", "inner.txt\x00", "ü", "\ud800", "x" * 300]),
    st.text(max_size=12), st.builds(lambda t: "/" + t, st.text(max_size=8)), st.integers(), st.none(),
    st.lists(st.text(max_size=3), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))
RECORDS = st.one_of(
    st.builds(lambda names: {"written": names}, st.lists(NAMES, max_size=6)),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=6),
                 lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
                 max_leaves=8))


def a_crafted_folder(root: Path, record: bytes) -> Path:
    """root/run holding files, a folder and links out; beside it the victims the links point to."""
    out = root / "run"
    (root / "outside").mkdir(parents=True)
    (root / "outside" / "keep.txt").write_text("kept")
    (root / "victim.txt").write_text("victim")
    out.mkdir()
    for name in ("results.csv", "env.json", "inner.txt"):
        (out / name).write_text("in")
    (out / "inner").mkdir()
    (out / "inner" / "deep.txt").write_text("deep")
    (out / "link-out").symlink_to(root / "outside", target_is_directory=True)
    (out / "link-file").symlink_to(root / "victim.txt")
    (out / ".inner.txt.abcd1234.tmp").write_text("tmp")
    (out / RECORD).write_bytes(record)
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(RECORDS.map(lambda r: json.dumps(r).encode()), st.binary(max_size=40)), st.booleans())
def test_no_record_ever_touches_anything_outside_its_folder(tmp_path_factory, record, resume):
    with tempfile.TemporaryDirectory(dir=tmp_path_factory.getbasetemp()) as tmp:
        root = Path(tmp)
        out = a_crafted_folder(root, record)
        outside, inside = files_of(root / "outside"), files_of(out)
        victim = (root / "victim.txt").read_bytes()
        try:
            run = RunDir.prepare(out, resume=resume, force=not resume)
            if resume:
                run.reopen()
        except UsageError as exc:
            assert "\n" not in str(exc)
            assert files_of(out) == inside  # refused: nothing removed inside either
            named = None
        else:
            named = set(json.loads(record)["written"])
        assert files_of(root / "outside") == outside and (root / "victim.txt").read_bytes() == victim
        assert sorted(p.name for p in root.iterdir()) == ["outside", "run", "victim.txt"]
        if named is not None:  # a valid record: its entries, and only those, are gone
            kept = {"results.csv", "env.json"} if resume else set()
            gone = (named - kept) | ({".inner.txt.abcd1234.tmp"} if "inner.txt" in named else set())
            expected = {k for k in inside if k.split("/")[0] not in gone}
            assert set(files_of(out)) - {RECORD} == expected - {RECORD}


def test_plot_into_a_run_with_a_crafted_record_is_refused(made, tmp_path):
    out = Path(shutil.copytree(made["kernel"], tmp_path / "run"))
    (tmp_path / "victim.txt").write_text("the user's\n")
    (out / RECORD).write_text(json.dumps({"written": ["summary.md", "../victim.txt"]}))
    before = files_of(tmp_path)
    assert_one_error_line(invoke("plot", out), "is not a record attnbench wrote")
    assert files_of(tmp_path) == before


def test_the_guard_refuses_a_removal_outside_the_tests_folder(monkeypatch):
    fd, name = tempfile.mkstemp(prefix="attnbench-guard-")  # the system's temporary folder, not pytest's
    os.close(fd)
    try:
        for remove in (os.unlink, os.remove, shutil.rmtree):
            with pytest.raises(AssertionError, match="outside the test's folder"):
                remove(name)
            assert Path(name).exists()
    finally:
        monkeypatch.undo()
        os.unlink(name)
