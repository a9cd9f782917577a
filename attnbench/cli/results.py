"""`attnbench compare`, `export` and `plot`: commands over saved results, no GPU needed.

Thin typed commands; the work is in read.py (what a results file is, checked), compare.py
(statistics, Markdown for PRs) and export.py (formats, plots), each imported when its command
runs (they bring pandas and matplotlib; `--help` needs neither). A CI job runs a scenario on a GPU
runner once, then gates and publishes with these. Kernel sweeps and e2e runs are both accepted;
one command never mixes the two.
"""

from __future__ import annotations

import datetime as dt
import os
from contextlib import nullcontext
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from attnbench.cli.atlas_results import any_atlas, compare_atlas_runs, export_atlas, plot_atlas_run
from attnbench.cli.common import fail, user_errors
from attnbench.cli.options import list_of
from attnbench.console import make_console
from attnbench.errors import AttnbenchError, UsageError

VERDICT_STYLE = {"slower": "bold red", "faster": "green", "host-bound": "magenta", "clock-shifted": "magenta",
                 "same": "dim", "noisy": "yellow", "unjudged": "dim"}


def compare(
    base: Annotated[Path, typer.Argument(help="Baseline: a results directory (its results.csv), results.csv or results.parquet, of a kernel sweep or an e2e run.")],
    new: Annotated[Path, typer.Argument(help="Candidate, as BASE.")],
    threshold: Annotated[str, typer.Option(help="Smallest change that counts. Example: --threshold 3%")] = "5%",
    markdown: Annotated[Optional[Path], typer.Option(help="Also write a Markdown report for a PR comment. Example: --markdown compare.md")] = None,
    ignore: Annotated[Optional[list], typer.Option(parser=list_of(str, "--ignore"), help="Key columns to leave out of the match, e.g. to compare an eager run with a graph run, or two backends. Example: --ignore mode")] = None,
) -> None:
    """Compare NEW with BASE row by row, and call a row slower or faster only where the data can tell.

    Rows match on their configuration key. Per row: the ratio new / base of the median, an interval
    for it, and a verdict: slower, faster, same or noisy. The interval comes from Welch's t over
    replicate medians; a row without replicates in both runs has its interval widened to the two
    runs' own p10..p90 spread (one run's samples cannot see drift between runs); a row that stores
    no spread gets no verdict (-). CPU timings get no verdict at all (the output says why once):
    identical CPU runs differ by more than a gate can tell from a change. Two verdicts show a
    change without judging it, and fail no gate: host-bound (an eager row at 1.25x its graph row or
    more in both runs: partly the host's time) and clock-shifted (the change does not stand at
    equal SM clocks, the runs' clocks on the row differing). e2e runs compare their
    p50 request latency. Find the threshold for your runner with `attnbench calibrate`. Two atlas
    runs (attnbench atlas) pair their cells: each choice judged per cell, moved winners listed.

    Exit status: 0 when no regression is shown, including when no row could be judged (CPU
    timings); 1 when a row is slower beyond threshold and noise, or a row that passed the accuracy
    check in BASE fails it (or errors) in NEW (on the CPU too); 1 with one error line on bad input.

    Example: attnbench compare results/main results/pr --threshold 5% --markdown compare.md
    """
    from attnbench.results import compare as cmp
    from attnbench.results.export import write_output
    from attnbench.results.read import load_run, one_kind
    from attnbench.results.verdicts import on_cpu

    console = make_console()
    with user_errors(console):
        if any_atlas([base, new]):
            if compare_atlas_runs(console, base, new, threshold, markdown, ignore):
                raise typer.Exit(1)
            return
        smallest = cmp.parse_threshold(threshold)
        runs = [load_run(base, "BASE"), load_run(new, "NEW")]
        kind = one_kind(runs, "compare")
        key = cmp.match_columns(ignore, kind)
        envs = [cmp.load_env(base, "BASE"), cmp.load_env(new, "NEW")]
        cpu = any(on_cpu(run.rows, env) for run, env in zip(runs, envs))
        result = cmp.compare_runs(runs[0].rows, runs[1].rows, smallest, key, kind, cpu)
        env_diff = cmp.env_differences(*envs)
        if markdown:
            write_output(markdown, cmp.markdown(result, env_diff), "--markdown", runs)
    print_comparison(console, result, env_diff)
    if os.path.samefile(runs[0].source, runs[1].source):
        console.print(f"[yellow]BASE and NEW are the same file ({escape(str(runs[0].source))}): every row "
                      "matches itself, so this shows no run-to-run noise; compare two runs[/]", highlight=False)
    if markdown:
        console.print(f"markdown: {escape(str(markdown))}", highlight=False)
    print_regressions(console, result)
    if result.regressed:
        raise typer.Exit(1)


def print_comparison(console: Console, result, env_diff) -> None:
    from attnbench.results.compare import summary_line

    if env_diff:
        env_table = Table("environment", "base", "new", title="environments differ")
        for key, b, n in env_diff:
            env_table.add_row(escape(key), escape(str(b)), escape(str(n)))
        console.print(env_table)
    table = Table("row", f"base {result.unit}", f"new {result.unit}", "new / base", "interval", "verdict")
    marks = {"replicates": "", "bootstrap": "°", "p10-p90": "*", "median only": "**"}
    for r in result.rows.itertuples(index=False):
        check = "" if r.check == "pass" else f" (new: check {escape(str(r.check))})"
        verdict = "-" if r.verdict == "unjudged" else r.verdict
        table.add_row(escape(r.label), f"{r.base_time:.4f}", f"{r.new_time:.4f}", f"{r.ratio:.3f}",
                      f"{r.ci_low:.3f}-{r.ci_high:.3f}{marks[r.method]}",
                      f"[{VERDICT_STYLE[r.verdict]}]{verdict}[/]{check}")
    console.print(table)
    used = set(result.rows["method"])
    if used - {"replicates"}:
        console.print("interval: Welch's t over replicate medians; ° bootstrap over one run's samples (no "
                      "replicates); * reaching the two runs' p10..p90 spread (no replicates); ** median only "
                      "(no spread stored); verdict -: none (why below)", highlight=False)
    for line in [*result.notes(), *result.unmatched()]:
        console.print(f"[yellow]{escape(line)}[/]", soft_wrap=True, highlight=False)
    style = "bold red" if result.regressed else "green"
    console.print(f"[{style}]{summary_line(result)}[/]")


def print_regressions(console: Console, result) -> None:
    for label in result.broken():
        console.print(f"[bold red]correctness regression:[/] {escape(label)} passed in BASE, not in NEW")


def export(
    results: Annotated[Path, typer.Argument(help="A results directory (its results.csv), results.csv or results.parquet, of a kernel sweep or an e2e run.")],
    fmt: Annotated[str, typer.Option("--format", help="gab (github-action-benchmark customSmallerIsBetter JSON), bmf (Bencher Metric Format JSON), md or csv. Example: --format gab")],
    out: Annotated[Optional[Path], typer.Option(help="Write here instead of stdout (never over the results read). Example: --out bench.json")] = None,
) -> None:
    """Write saved results as github-action-benchmark JSON, Bencher Metric Format JSON, a Markdown table or CSV.

    An atlas run (attnbench atlas): its cells table (csv) or its summary (md).

    Example: attnbench export results/h200 --format gab --out bench.json
    Example: attnbench export results/h200 --format bmf --out bmf.json
    """
    from attnbench.results.export import FORMATS, write_output
    from attnbench.results.read import load_run

    console = make_console(True)
    with user_errors(console):
        if fmt not in FORMATS:
            raise UsageError(f"--format: unknown format {fmt!r}; choose {', '.join(FORMATS)}")
        if any_atlas([results]):
            text, inputs = export_atlas(results, fmt, out)
        else:
            run = load_run(results, "RESULTS")
            text, inputs = FORMATS[fmt](run.rows, run.kind), [run]
        if out:
            write_output(out, text, "--out", inputs)
    if out:
        console.print(f"{fmt}: {escape(str(out))}", highlight=False)
    else:
        print(text, end="")


def plot(
    results: Annotated[list[Path], typer.Argument(help="One or more results directories or files, overlaid.")],
    label: Annotated[Optional[list[str]], typer.Option(help="A label per RESULTS, in order (default: directory names). Example: --label h100 --label h200")] = None,
    out: Annotated[Optional[Path], typer.Option(help="A new or empty directory for the PNGs, not a symlink nor a run being plotted (default: redraw one run's pictures in its own directory; results/<time>-plots for several runs). Example: --out plots")] = None,
) -> None:
    """Redraw latency and split / unified plots from saved results, several runs overlaid.

    Overlay two GPUs, two library versions, or a run before and after a change. Each PNG's title
    says the device, library versions, dtype, context and mode; CPU runs are marked as demos.
    An atlas run (attnbench atlas) is drawn alone, as its own winner maps and margin curves.

    Example: attnbench plot results/h100 results/h200 --label h100 --label h200 --out plots
    """
    from attnbench.results.export import plot_results
    from attnbench.results.read import load_run, one_kind

    console = make_console()
    with user_errors(console):
        if any_atlas(results):
            return plot_atlas_run(console, results, out, plot_target)
        labels = run_labels(results, label)
        names = ["RESULTS"] if len(results) == 1 else [f"RESULTS {i + 1}" for i in range(len(results))]
        runs = [load_run(path, name) for path, name in zip(results, names)]
        kind = one_kind(runs, "plot")
        steps = replay_steps(runs)
        target, claim = plot_target(out, results, runs)
        labelled = [(name, run.rows) for name, run in zip(labels, runs)] if len(runs) > 1 else [("", runs[0].rows)]
        try:
            with claim:
                written = plot_results(labelled, target, kind, steps, replay_trace(runs) if steps is not None else "")
        except OSError as exc:  # the lock or the record in a directory that cannot be written
            raise UsageError(f"cannot write plots into {target}: {exc.strerror or exc}") from None
    if not written:
        fail(console, "no timed rows to plot (every row was skipped or failed to run)")
    for path in written:
        console.print(escape(str(path)), highlight=False)


def replay_steps(runs: list):
    """A replay run's buckets.csv, which its pictures need (None for other runs); replay runs are
    drawn one at a time, since each weighs its buckets by its own trace's steps."""
    from attnbench.results.replay import read_steps

    replays = [run for run in runs if "bucket" in run.rows.columns]
    if not replays:
        return None
    if len(runs) > 1:
        raise UsageError(f"plot: {replays[0].path} is a replay run; plot draws a replay run alone (its trace "
                         "weighs the buckets), so give it on its own")
    return read_steps(replays[0].source.parent)


def replay_trace(runs: list) -> str:
    """The file a replay run replayed (env.json's replay.trace), which its pictures name; "" where unsaid."""
    from attnbench.results.compare import load_env

    try:
        trace = (load_env(runs[0].source).get("replay") or {}).get("trace")
    except AttnbenchError:  # a broken env.json: the pictures go without the trace's name, as before
        return ""
    return trace if isinstance(trace, str) else ""


def plot_target(out: Path | None, results: list[Path], runs: list):
    """(directory, claim) for plot: an --out that is new or empty, not a symlink and not a run being
    plotted, made; without --out, one run's own directory, its pictures redrawn under its lock
    (each replaced atomically, a link never followed), or a new results/<time>-plots for several."""
    from attnbench.results.export import refuse_an_input
    from attnbench.runs.rundir import RECORD, RunDir

    if out is None:
        if len(results) == 1 and os.path.isdir(results[0]):
            run = RunDir(results[0], "RESULTS")
            return run.path, run.locked() if (run.path / RECORD).is_file() else nullcontext()
        out = Path("results") / f"{dt.datetime.now():%Y%m%d-%H%M%S}-plots"
    refuse_an_input(out, "--out", runs)
    if os.path.islink(out):
        raise UsageError(f"--out: {out} is a symlink; give a directory path (plot never writes through a link)")
    try:
        holding = out.is_dir() and any(out.iterdir())
    except OSError as exc:
        raise UsageError(f"--out: cannot use {out}: {exc.strerror or exc}") from None
    if holding:
        raise UsageError(f"--out: {out} is not empty; give a new or empty directory")
    return RunDir.prepare(out).path, nullcontext()


def run_labels(results: list[Path], labels: list[str] | None) -> list[str]:
    if labels:
        if len(labels) != len(results):
            raise UsageError(f"--label: got {len(labels)} label(s) for {len(results)} results; give one per results")
        repeated = [name for name in labels if labels.count(name) > 1]
        if repeated:
            raise UsageError(f"--label: {repeated[0]!r} is given twice; each run needs its own label")
        return labels
    names = [Path(os.path.realpath(p if os.path.isdir(p) else p.parent)).name for p in results]
    return [n if names.count(n) == 1 else f"{n}#{i + 1}" for i, n in enumerate(names)]
