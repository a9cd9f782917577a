"""`attnbench verify`: typed flags in, the graph-safety table out (kernels/verify.py does the work).

Why a command of its own: graph safety is a yes/no per backend x strategy x policy, found by
replaying captured calls on other batches; it times nothing and shares no flags' meaning with
`kernel` beyond the shape of the attention. The replays and the registry (torch) are imported
when the command runs; `--help` needs neither.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from attnbench.cli import options
from attnbench.cli.common import user_errors
from attnbench.cli.options import list_of
from attnbench.console import make_console
from attnbench.errors import UsageError, check_choices, check_unique

if TYPE_CHECKING:
    from attnbench.runs.rundir import RunDir

# --contexts' defaults: the GPU's, and on the CPU the same replays on shorter contexts (the
# reference's eager cases then take seconds, not minutes)
CONTEXTS = {"cuda": [512, 4096], "cpu": [64, 256]}


def verify(
    backend: options.Backend = None,
    strategy: options.Strategy = "unified,split",
    policy: Annotated[list, typer.Option(parser=list_of(str, "--policy"), help="naive (max_seqlen from the capture batch, buffers' tails left as they were) and/or safe (the seed's recipe). Example: --policy safe")] = "naive,safe",
    heads: Annotated[int, typer.Option(help="Query heads. Example: --heads 32")] = 32,
    kv_heads: Annotated[Optional[int], typer.Option(help="KV heads (GQA). Example: --kv-heads 32")] = 8,
    dim: Annotated[int, typer.Option(help="Head dim. Example: --dim 128")] = 128,
    dtype: options.Dtype = "bf16",
    block_size: options.BlockSize = 16,
    contexts: Annotated[Optional[list], typer.Option(parser=list_of(int, "--contexts"), help="SHORT,LONG: KV lengths of the capture batches and of the short -> long replay (default 512,4096; 64,256 on the CPU). Example: --contexts 512,4096")] = None,
    seqs: Annotated[int, typer.Option(help="Decode sequences of the capture batches. Example: --seqs 4")] = 4,
    seed: Annotated[int, options.seed("block tables and inputs")] = 0,
    device: options.Device = "auto",
    out: Annotated[Optional[Path], typer.Option(help="Write verify.csv and summary.md into this new or empty directory (claimed before anything runs, as kernel's --out; not a symlink). Example: --out results/verify-h200")] = None,
) -> None:
    """Capture each backend x strategy's attention call in a CUDA graph on one batch, replay it on
    other batches written into the same buffers (decode -> mixed, short -> long context, fewer ->
    more sequences), and check every replay against the float32 reference, under the naive and
    the safe policy. A case outside what a backend declares its graphs may be replayed on
    (FlashInfer: single-token decode batches only) is reported unsupported, not run; so is a case
    that does not fit in memory (skipped). A backend that is not graph-safe (the reference, the
    only one on the CPU) runs its cases eagerly instead, planned on each batch and checked against
    a float64 attention. On the CPU (no GPU visible, or `--device cpu`) it runs the reference's eager
    cases on shorter contexts (64,256), and the CPU emulation of replays for graph-safe backends
    whose launches read the buffers when they run.

    Exit status: 0 when at least one case was judged and none failed verify; 1 when a graph-safe
    backend failed a case under the safe policy (what kernel and e2e graph modes use) or an eager
    case failed (naive failures are findings); 1 with one error: line on bad flags, an --out it
    cannot claim, or when nothing can be judged here (every case skipped or unsupported).

    Example: attnbench verify --backend vllm-fa2,vllm-fa3 --policy naive,safe
    """

    from attnbench.device import resolve_device
    from attnbench.kernels.backends.registry import resolve_backends
    from attnbench.kernels.notices import cpu_run_line
    from attnbench.kernels.verify import plan_rows, replay_cases
    from attnbench.kernels.workload import SweepPoint

    console = make_console()
    with user_errors(console):
        dev = resolve_device(device)  # auto without a GPU: the CPU, which judges what it can (said below)
        short, long = _short_long(contexts or CONTEXTS[dev.type])
        _check_lists(backend, strategy, policy, seqs)
        point = SweepPoint(kind="mixed", num_tokens=seqs, num_heads=heads, num_kv_heads=kv_heads,
                           head_dim=dim, dtype=dtype, block_size=block_size, seed=seed)
        cases = replay_cases(short, long, seqs)
        rows = plan_rows(resolve_backends(backend, dev), strategy, policy, point, cases, dev)
        _check_judgeable(rows)
        run = _claim(out) if out is not None else None
        if contexts is None and dev.type == "cpu":
            gpu = ",".join(map(str, CONTEXTS["cuda"]))
            said = cpu_run_line(f"eager cases (the reference backend) against a float64 attention (the GPU's "
                                f"--contexts are {gpu})", {"contexts": f"{short},{long}"})
            console.print(said, highlight=False, soft_wrap=True)
        _run(console, rows, point, cases, dev, run)


def _check_lists(backend: list[str] | None, strategy: list[str], policy: list[str], seqs: int) -> None:
    """Known names, each listed once (a repeated backend would double every row), --seqs in range."""
    from attnbench.kernels.graphsafe import POLICIES
    from attnbench.kernels.workload import STRATEGIES

    if not 1 <= seqs <= 4096:
        raise UsageError(f"--seqs: must be between 1 and 4096, got {seqs}")
    check_choices(strategy, STRATEGIES, "--strategy", "strategy")
    check_choices(policy, POLICIES, "--policy", "policy")
    for values, flag in [(backend or [], "--backend"), (strategy, "--strategy"), (policy, "--policy")]:
        check_unique(values, flag)


def _check_judgeable(rows: list[dict]) -> None:
    """Nothing to judge (every case skipped or unsupported) is refused before anything runs."""
    from attnbench.kernels.verify import not_run

    if all(r["verdict"] for r in rows):
        raise UsageError("nothing verify can judge here: " + "; ".join(not_run(rows)))


def _claim(out: Path) -> RunDir:
    """--out as kernel claims it (new or empty, a file or an unwritable place refused), and not a
    symlink: its files would land in the link's target."""
    from attnbench.runs.rundir import RunDir

    if out.is_symlink():
        raise UsageError(f"--out: {out} is a symlink; give the directory itself")
    return RunDir.prepare(out)


def _run(console: Console, rows: list[dict], point, cases, device, run: RunDir | None) -> None:
    """Say what will not run, run the rest (the --out directory locked meanwhile), print, write."""
    from contextlib import nullcontext

    from attnbench.kernels.verify import not_run, run_rows

    for line in not_run(rows):
        console.print(f"not run: {line}", highlight=False, markup=False)
    with user_errors(console), (run.locked() if run is not None else nullcontext()):
        run_rows(rows, point, cases, device)
        print_verify(console, rows, run)


def print_verify(console: Console, rows: list[dict], run: RunDir | None) -> None:
    """The table of the cases that ran and the count; verify.csv and summary.md into `run` when
    --out was given; exit 1 when a case failed verify."""
    from attnbench.kernels.verify import counts_line, gating_failures, judged, results_csv, summary

    table = Table("backend", "strategy", "policy", "case", "verdict", "rel L2", "reason")
    for r in judged(rows):
        style = {"pass": "green", "FAIL": "red"}.get(r["verdict"], "yellow")
        table.add_row(r["backend"], r["strategy"], r["policy"], r["case"], f"[{style}]{r['verdict']}[/]",
                      f"{r['rel_l2_error']:.1e}", escape(r["reason"]))
    console.print(table)
    console.print(counts_line(rows), highlight=False, markup=False)
    for r in gating_failures(rows):
        console.print(f"FAIL {r['backend']} {r['strategy']} {r['policy']} {r['case']}: {r['reason']}",
                      highlight=False, markup=False)
    if run is not None:
        try:
            run.write_text("verify.csv", results_csv(rows))
            run.write_text("summary.md", summary(rows))
        except OSError as exc:
            raise UsageError(f"--out: cannot write into {run.path}: {exc.strerror or exc}") from None
        console.print(f"wrote {run.path / 'verify.csv'} and {run.path / 'summary.md'}", highlight=False)
    if gating_failures(rows):
        raise typer.Exit(1)


def _short_long(values: list[int]) -> tuple[int, int]:
    if len(values) != 2 or not 1 <= values[0] < values[1] <= 1 << 22:
        raise UsageError(f"--contexts: expected SHORT,LONG with 1 <= SHORT < LONG <= {1 << 22}, "
                         f"got {','.join(map(str, values))!r}")
    return values[0], values[1]
