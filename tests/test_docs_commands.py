"""The README's and the guides' commands run as written: every `attnbench` line of a ```bash block in
README.md, docs/index.md and docs/guides/*.md that can run on the CPU runs here, in-process, in a
fresh clone's folder (the repository's inputs, scenarios/ and results/examples/, in a git checkout),
and exits 0.

Why: the docs said things that were not true (a GPU command shown as the CPU's, a trace without the
shape the next command needs, a folder a clone does not have), and a new user finds that out on the
first command. Nothing is substituted but the working directory.

What the pages follow, and this test reads:
- a command whose trailing comment starts with `GPU` (`# GPU`, `# GPU: why`) needs a GPU; it is
  not run, but it is run once to see that it refuses here (a `# GPU` on a command the CPU runs would
  hide it from this test);
- only `attnbench ...` commands run (`\\` continuations joined, each `&&` part on its own); pip,
  git, python, tensorboard and nsys lines are the reader's set-up;
- the lists below, each entry with its reason: NOT_HERE (the reader's own files or machines),
  FAILS_BY_DESIGN (a page shows the error), SLOW (a whole command that runs on the CPU, but longer
  than this test may take: run them with ATTNBENCH_DOCS_SLOW=1); an entry that matches no command
  fails the test.
The rule and dashboard guides run on results/examples, which other work regenerates: a failure
there is an expected failure for now (XFAIL_PAGES), not a pass.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from attnbench.cli.main import app

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "docs" / "index.md", *sorted((ROOT / "docs" / "guides").glob("*.md"))]
INPUTS = ("scenarios", "results/examples", "tests")  # what a clone has that the commands read
BLOCK = re.compile(r"^( *)```bash\n(.*?)^\1```", re.MULTILINE | re.DOTALL)
COMMAND_WORDS = ("attnbench", ".venv/bin/attnbench")
PROFILE = "attnbench kernel --heads 32 --kv-heads 8 --dim 128 --tokens 100,1000 --kind decode,mixed --profile"

NOT_HERE = {  # (page, the command's start): why it cannot run in a fresh clone
    ("README.md", "attnbench ab --baseline src=../attnbench-main"): "needs main checked out beside it (git worktree)",
    ("ab.md", "attnbench ab --baseline python=/venvA"): "needs the reader's venvs and checkouts",
    ("traces.md", "attnbench trace convert --sglang-log server.log"): "reads the reader's SGLang log",
    ("traces.md", "attnbench trace convert --vllm-log vllm.log"): "reads the reader's vLLM log",
    ("traces.md", "attnbench trace convert --burstgpt BurstGPT_1.csv"): "reads BurstGPT's CSV (a download)",
    ("traces.md", "attnbench trace convert --flashinfer-bench flashinfer-trace/"): "reads flashinfer-trace (a download)",
    ("e2e.md", "attnbench e2e --model ./checkpoints/my-llama"): "reads the reader's checkpoint",
    ("e2e.md", "attnbench plot runs/trace-a"): "reads the reader's e2e --trace runs",
    ("e2e.md", "attnbench export runs/trace-a"): "reads the reader's e2e --trace runs",
    ("e2e.md", "attnbench compare runs/trace-"): "reads the reader's e2e --trace runs",
    ("scenarios-and-ci.md", "attnbench compare results/main results/pr"): "the reader's two runs",
    ("scenarios-and-ci.md", "attnbench compare results/e2e-main"): "the reader's two e2e runs",
    ("scenarios-and-ci.md", "attnbench export results/pr"): "the reader's run",
    ("rule.md", "attnbench rule fit runs/replay-a"): "the reader's replays and sweep",
    ("rule.md", "attnbench rule apply rules/h200-chat-high runs/"): "the reader's replay of another trace",
    ("rule.md", "attnbench rule fit runs/h200-replay-scale"): "the reader's replay with --exact-sample",
    ("rule.md", "attnbench rule apply rules/scale"): "the reader's replay with --exact-sample",
    ("dashboard.md", "attnbench dashboard bench-history --out site --plotly-js"): "needs Plotly's bundle (npm pack)",
}
FAILS_BY_DESIGN = {  # (page, the command's start): the error the page shows
    ("verify.md", "attnbench verify --device cpu --backend flex"): "nothing verify can judge here",
}
SLOW = {  # (page, the whole command): what it took here (2 cores, shared with other jobs), each a finding
    ("README.md", ".venv/bin/attnbench kernel --heads 32 --dim 128"): "49-79 s: the CPU's default sweep, 30 rows",
    ("README.md", "attnbench e2e"): "19 s: the CPU's pipeline demo",
    ("README.md", "attnbench replay steps.jsonl --out results/replay-cpu"): "24 s: the CPU's pipeline demo",
    ("README.md", PROFILE): "329 s: --profile, 1000 tokens",
    ("profiling.md", PROFILE): "329 s: --profile, 1000 tokens",
    ("index.md", "attnbench kernel --heads 32 --kv-heads 8 --dim 128 --kind decode,mixed"): "17 s",
    ("kernel.md", "attnbench kernel --heads 32 --dim 128"): "49-79 s: the CPU's default sweep",
    ("kernel.md", "attnbench kernel --heads 12 --dim 64 --tokens 100,500,1000 --kind decode --context 1024"): "over 60 s",
    ("kernel.md", "attnbench kernel --heads 32 --dim 128 --threshold 3% --max-replicates 6"): "minutes: replicates",
    ("kernel.md", "attnbench kernel --heads 32 --dim 128 --replicates 3"): "minutes: 3 replicates of the default sweep",
    ("kernel.md", "PYTHONPATH=tests ATTNBENCH_EXTRA_BACKENDS=fake_backends:FaultingBackend attnbench kernel --heads 32 "
                  "--kv-heads 8 --dim 128 --tokens 4,8,12 --kind decode --backend test-fault --isolate"):
        "10-22 s: a worker process per point",
    ("e2e.md", "attnbench e2e"): "10-20 s: the CPU's pipeline demo",
    ("e2e.md", "attnbench e2e --model tiny --device cpu --input-len 12 --output-len 4 --batch-size 1,3 --warmup 1 "
               "--iters 2"): "17 s",
    ("e2e.md", "attnbench e2e --trace scenarios/traces/chat-high.requests.jsonl"): "87 s: the CPU's pipeline demo",
    ("multi-gpu.md", "attnbench kernel --heads 32 --dim 128 --shard 0/2 --out runs/shard-0"): "39 s",
    ("multi-gpu.md", "attnbench kernel --heads 32 --dim 128 --shard 1/2 --out runs/shard-1"): "27 s",
    ("multi-gpu.md", "attnbench merge runs/shard-0 runs/shard-1 --out runs/all"): "5 s, on the two shards above",
    ("replay.md", "attnbench replay decode-heavy.jsonl"): "60 s: the CPU's pipeline demo",
    ("scenarios-and-ci.md", "attnbench calibrate --heads 32 --dim 128 --kind decode --replicates 5"):
        "over 70 s: two sweeps of 5 replicates",
}
XFAIL_PAGES = {"rule.md", "dashboard.md"}


@dataclass(frozen=True)
class Command:
    page: str
    line: str  # as the page writes it, continuations joined
    words: tuple[str, ...]  # after `attnbench`
    env: tuple[tuple[str, str], ...]  # NAME=VALUE words before it
    gpu: bool


def commands(page: Path) -> list[Command]:
    """Every attnbench command of the page's bash blocks, in the page's order."""
    found = []
    for match in BLOCK.finditer(page.read_text(encoding="utf-8")):
        body = re.sub(r"\\\n\s*", " ", match.group(2))
        for raw in body.splitlines():
            code, _, comment = ("", "", "") if raw.strip().startswith("#") else raw.partition(" #")
            gpu = comment.strip().startswith("GPU")
            for part in code.split("&&"):
                words = shlex.split(part)
                env = []
                while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):
                    env.append(tuple(words.pop(0).split("=", 1)))
                if words and words[0] in COMMAND_WORDS:
                    found.append(Command(page.name, " ".join(part.split()), tuple(words[1:]), tuple(env), gpu))
    return found


def entry(listing: dict, command: Command, exact: bool = False):
    """The listing's value for the command: keyed by its page and its start (its whole line: exact)."""
    return next((value for (page, start), value in listing.items() if page == command.page
                 and (command.line == start if exact else command.line.startswith(start))), None)


def invoke(command: Command) -> tuple[int, str, float]:
    """In-process through CliRunner; a command with NAME=VALUE words before it in a subprocess, as a
    shell runs it (the backend registry reads ATTNBENCH_EXTRA_BACKENDS when it is imported)."""
    start = time.perf_counter()
    if command.env:
        env = {**os.environ, **dict(command.env), "COLUMNS": "200"}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(ROOT)) if p)  # attnbench, installed
        done = subprocess.run([sys.executable, "-m", "attnbench", *command.words], env=env, capture_output=True,
                              text=True, timeout=300)
        return done.returncode, done.stdout + done.stderr, time.perf_counter() - start
    result = CliRunner().invoke(app, list(command.words), env={"COLUMNS": "200"})
    crashed = result.exception if not isinstance(result.exception, SystemExit) else None
    output = result.output + (f"\n{type(crashed).__name__}: {crashed}" if crashed else "")
    return result.exit_code, output, time.perf_counter() - start


def fresh_clone(folder: Path) -> Path:
    """A folder as a clone has it: the inputs, in a git checkout (runs record its commit)."""
    for name in INPUTS:
        shutil.copytree(ROOT / name, folder / name, ignore=shutil.ignore_patterns("__pycache__"))
    git = ["git", "-c", "user.name=docs", "-c", "user.email=docs@test", "-C", str(folder)]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "clone"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    return folder


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_the_pages_cpu_commands_exit_0(page, tmp_path, monkeypatch):
    monkeypatch.chdir(fresh_clone(tmp_path))
    slow_too = os.environ.get("ATTNBENCH_DOCS_SLOW") == "1"
    ran, failed = [], []
    for command in commands(page):
        if command.gpu or entry(NOT_HERE, command) or (entry(SLOW, command, exact=True) and not slow_too):
            continue
        code, output, seconds = invoke(command)
        expected = entry(FAILS_BY_DESIGN, command)
        ok = (code == 1 and expected in output) if expected else code == 0
        ran.append(f"{seconds:5.1f}s {command.page}: {command.line}")
        if not ok:
            failed.append(f"{command.line}\n  exit {code}: {output.strip()[-600:]}")
    print("\n".join(ran))
    if failed and page.name in XFAIL_PAGES:
        pytest.xfail("results/examples are being regenerated: " + "\n".join(failed))
    assert not failed, "\n".join(failed)


def test_gpu_marked_commands_refuse_on_the_cpu(monkeypatch, tmp_path):
    """`# GPU` is a claim too: each marked command, run here, must refuse (exit 1), not run, and not
    for a flag the command lacks (a parse error ends with `(see `attnbench ... --help`)`)."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: the marked commands would run, not refuse")
    monkeypatch.chdir(fresh_clone(tmp_path))
    marked = [c for page in PAGES for c in commands(page) if c.gpu]
    ran = [(c, *invoke(c)) for c in marked]
    wrong = [f"{c.page}: {c.line}: exit {code}: {output.strip()[-300:]}" for c, code, output, _ in ran
             if code != 1 or "--help`)" in output]
    assert marked and not wrong, "\n".join(wrong)


def test_commands_on_the_readers_files_take_the_flags_they_give(monkeypatch, tmp_path):
    """NOT_HERE commands cannot run here, but their flags are the CLI's: a missing file is the error,
    never a flag the command lacks (click parses every flag before a command reads anything)."""
    monkeypatch.chdir(fresh_clone(tmp_path))
    listed = [c for page in PAGES for c in commands(page) if not c.gpu and entry(NOT_HERE, c)]
    ran = [(c, *invoke(c)) for c in listed]
    wrong = [f"{c.page}: {c.line}: {output.strip()[-300:]}" for c, _, output, _ in ran if "--help`)" in output]
    assert listed and not wrong, "\n".join(wrong)


def test_every_listed_command_is_on_its_page():
    lines = {(c.page, c.line) for page in PAGES for c in commands(page)}
    stale = [key for key in {**NOT_HERE, **FAILS_BY_DESIGN}
             if not any(page == key[0] and line.startswith(key[1]) for page, line in lines)]
    stale += [key for key in SLOW if key not in lines]
    assert stale == []


def test_the_reader_follows_the_convention(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("```bash\n# a comment line\nFOO=1 attnbench kernel --tokens 4 \\\n  --kind decode   # GPU: graphs\n"
                    "pip install x && attnbench backends  # which run here\n```\n", encoding="utf-8")
    assert commands(page) == [
        Command("p.md", "FOO=1 attnbench kernel --tokens 4 --kind decode", ("kernel", "--tokens", "4", "--kind", "decode"),
                (("FOO", "1"),), True),
        Command("p.md", "attnbench backends", ("backends",), (), False)]
