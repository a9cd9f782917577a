"""`attnbench doctor`: typed flags in; the environment and one verdict line per backend out.

runs/doctor.py does the work (imported when the command runs: it brings torch); this prints each
verdict as it is made and sets the exit code.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.text import Text

from attnbench.cli.common import command_line, user_errors
from attnbench.cli.options import Device, list_of
from attnbench.console import make_console

if TYPE_CHECKING:
    from attnbench.runs.doctor import Verdict

STYLES = {"ok": "green", "FAIL": "bold red", "skipped": "yellow"}


def doctor(
    device: Device = "auto",
    backend: Annotated[Optional[list], typer.Option(parser=list_of(str, "--backend", optional=True), help="Check only these backends (default: every one, opt-in ones too). Example: --backend vllm-fa2,flex")] = None,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Also write the whole report (environment, every row checked) as JSON to this new file; an existing path is refused. Example: --json doctor.json")] = None,
) -> None:
    """Check this machine: its environment, and every available backend against the float32 reference.

    Reports the driver, CUDA, torch, the GPUs, SM clocks (now and max), persistence mode, whether clocks are locked, and each kernel library's version or why it is missing. Then checks every available backend x strategy x mode (eager, and graph where the backend is graph-safe) on a small decode, prefill and mixed batch, and on a GPU runs verify's safe-policy replays of graph-safe backends and shows that --cold-l2's flush leaves L2 cold (a batch inside L2 timed warm and cold must differ, one 16 times L2 must not). Prints one line per backend (ok with what it checked, FAIL with the first failing row, skipped with the reason) and a summary; exit 1 when anything checked is wrong.

    Takes well under a minute on the CPU (the reference and the backends that run there) and a few minutes on a GPU, plus any first-use compile of a kernel library (FA2's PTX on Hopper, FlashInfer's modules).

    Example: attnbench doctor --json doctor.json
    """
    from attnbench.device import resolve_device
    from attnbench.runs.doctor import (
        backend_names,
        check_json_path,
        clocks_line,
        environment,
        environment_lines,
        run_doctor,
        write_json,
    )
    from attnbench.runs.l2check import l2_lines

    console = make_console()

    def say(line: str | Text) -> None:  # as text, one line whatever the terminal's width
        console.print(line, markup=False, highlight=False, soft_wrap=True)

    with user_errors(console):
        dev = resolve_device(device)
        if json_path is not None:
            check_json_path(json_path)
        names = backend_names(backend)
        env = environment(command_line())
        for line in environment_lines(env):
            say(line)
        report = run_doctor(dev, env, names, lambda verdict: say(styled(verdict)))
        for line in filter(None, (clocks_line(env), *l2_lines(env.get("l2_check")), report.cpu_note())):
            say(line)
        if json_path is not None:
            write_json(report, json_path)
    say(report.summary())
    if report.failed:
        raise typer.Exit(1)


def styled(verdict: Verdict) -> Text:
    """The verdict's line, its status coloured."""
    text = Text(verdict.line())
    start = len(verdict.line()) - len(verdict.detail) - len(verdict.status) - 2
    text.stylize(STYLES[verdict.status], start, start + len(verdict.status))
    return text
