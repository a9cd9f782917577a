"""A kernel scenario as a job: every sweep planned first, one run per context length, merged into one.

`attnbench run scenarios/NAME.toml` (cli/run.py) reads the file into KernelArgs, one per context
length it lists; here each is planned on this machine before any runs (memory included), then
measured by runs/kernel.py's run_kernel. One context runs into OUT itself; several run into
OUT/context-*/ and are merged into OUT when all are done, so OUT reads as one run. What ran is
recorded beside the results in scenario.json.
"""

from __future__ import annotations

import dataclasses
import json
import re
import signal
from pathlib import Path

import pandas as pd
import torch
from rich.console import Console

from attnbench.console import default_out_dir
from attnbench.device import device_name
from attnbench.errors import Interrupted, UsageError
from attnbench.kernels.plan import KernelArgs
from attnbench.kernels.sweep import SweepPlan
from attnbench.results import files
from attnbench.results.export import plot_results, to_csv, to_markdown
from attnbench.results.notes import summary_notes
from attnbench.runs.kernel import check_kernel_resume, plan_kernel, run_kernel
from attnbench.runs.rundir import LOCK, RECORD, RunDir


@dataclasses.dataclass
class ContextSweep:
    """One sweep of a scenario: the args it runs with and the plan they gave on this machine."""

    context: str
    args: KernelArgs
    plan: SweepPlan


@dataclasses.dataclass
class ScenarioPlan:
    gpu: str | None
    sweeps: list[ContextSweep]


def context_dir(context: str) -> str:
    return "context-" + re.sub(r"[^0-9a-z]+", "-", str(context).lower()).strip("-")


def refuse_gpu_only(cpu: bool | str | None, device: str, devices: str | None = None) -> None:
    """A scenario that says it needs a GPU (`cpu = "why"`), where none is visible and the device was
    left to attnbench: one line, before anything runs. --device cpu asks for the CPU anyway."""
    if isinstance(cpu, str) and device == "auto" and not devices and not torch.cuda.is_available():
        raise UsageError(f"needs a GPU ({cpu}); none is visible here (give --device cpu to run it on the "
                         "CPU anyway)")


def preflight(sweeps: list[KernelArgs]) -> ScenarioPlan:
    """Every sweep of the scenario (one per context), planned on this machine before any runs:
    what the run plans, so that `--check` refuses what the run would (kernels/plan.py)."""
    planned = []
    for args in sweeps:
        plan = plan_kernel(args)
        planned.append(ContextSweep(plan.points[0].context, args, plan))
    return ScenarioPlan(device_name(torch.device(planned[0].plan.device)), planned)


def run_kernel_scenario(name: str, plan: ScenarioPlan, console: Console, command: list[str], record: dict) -> Path:
    """Run the scenario's sweeps into one directory; `record` is written there as scenario.json."""
    first = plan.sweeps[0].args
    out = Path(first.resume or first.out or default_out_dir(plan.gpu or "cpu", name))
    if len(plan.sweeps) == 1:
        run_kernel(dataclasses.replace(first, out=out if not first.resume else None), console, command)
        out.mkdir(parents=True, exist_ok=True)
        RunDir(out).write_text("scenario.json", json.dumps(record, indent=2) + "\n")
        return out
    parts = [out / context_dir(sweep.context) for sweep in plan.sweeps]
    run = claim_contexts(out, plan, parts, command)
    with run.locked():
        for part, sweep in zip(parts, plan.sweeps):
            console.rule(f"{name}: context {sweep.context}")
            resumable = first.resume and holds_results(part)
            part_args = dataclasses.replace(sweep.args, out=None if resumable else part,
                                            resume=part if resumable else None, force=False)
            try:
                run_kernel(part_args, console, command)
            except Interrupted as exc:
                number = exc.exit_code - 128
                raise Interrupted(f"interrupted by {signal.Signals(number).name} in context {sweep.context}; {out} "
                                  f"holds the finished sweeps (finish it with the same flags and --resume {out})",
                                  number) from None
        merge_contexts(parts, run, console)
        run.write_text("scenario.json", json.dumps(record, indent=2) + "\n")
    return out


def holds_results(part: Path) -> bool:
    return (part / "results.csv").exists() or (part / "results.csv").is_symlink()


def claim_contexts(out: Path, plan: ScenarioPlan, parts: list[Path], command: list[str]) -> RunDir:
    """OUT of a scenario of several contexts: new, emptied (--force), or resumed with its context-*/
    sweeps. A resume checks every sweep's directory first: a refused one changes nothing anywhere."""
    first = plan.sweeps[0].args
    if not first.resume:
        return RunDir.prepare(out, force=first.force)
    if not any(out.glob("context-*/results.csv")):
        raise UsageError(f"--resume: {out} holds no sweep of this scenario to resume")
    run = RunDir(out, "--resume")
    run.check_unlocked("--resume")
    listed = {part.name for part in parts}
    merged = sorted(p.name for p in out.iterdir() if p.name not in listed | {LOCK})
    if merged and not run.has_record:
        raise UsageError(f"--resume: {out} holds {merged[0]} beside its sweeps but no record of what attnbench "
                         f"wrote there ({RECORD}), so nothing there is removed or written over; move it away")
    for other in sorted(p.parent.name for p in out.glob("context-*/results.csv")):
        if other not in listed:
            raise UsageError(f"--resume {out}: it holds {other}/, a context this scenario does not list; resume it "
                             "with the contexts it was made with or start a new directory")
    for part, sweep in zip(parts, plan.sweeps):
        if holds_results(part):
            check_kernel_resume(dataclasses.replace(sweep.args, out=None, resume=part), sweep.plan, part, command)
        elif part.is_dir() and any(part.iterdir()):
            raise UsageError(f"--resume {out}: {part.name}/ holds files but no results.csv; move them away and "
                             "resume again")
    run.clear(keep=tuple(sorted(listed)))  # the merged outputs go; each sweep's directory stays
    return run


def merge_contexts(parts: list[Path], run: RunDir, console: Console) -> None:
    """One results directory from several sweeps: rows, parquet, env, summary and plots."""
    out = run.path
    df = pd.concat([files.load_results(p / "results.csv") for p in parts], ignore_index=True)
    run.write_text("results.csv", to_csv(df))
    files.write_parquet(df, out)
    run.write_text("env.json", (parts[0] / "env.json").read_text())
    run.write_text("summary.md", "# attnbench kernel summary\n\n" + to_markdown(df) + "\n"
                   + "\n".join(summary_notes(df)))
    telemetry = [p / "telemetry.csv" for p in parts if (p / "telemetry.csv").is_file()]
    if telemetry:  # one header, then every sweep's samples
        texts = [t.read_text().splitlines(keepends=True) for t in telemetry]
        run.write_text("telemetry.csv", "".join([texts[0][0], *(line for t in texts for line in t[1:])]))
    plots = plot_results([("", df)], out)
    console.print(f"merged {len(df)} rows of {len(parts)} sweeps: {out}/results.csv, summary.md, env.json, "
                  f"{len(plots)} plot(s)")

