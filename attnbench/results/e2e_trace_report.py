"""What `attnbench e2e --trace` writes and prints: trace.csv, requests.csv, results.csv, agreement.csv, summary.md, plots.

Why apart from e2e_report.py: a served trace has no grid point and no p50 over runs; its rows are
vllm bench serve's metrics per backend x strategy x mode and measured serve (e2e/serve_metrics.py),
results.csv holds each metric over the serves (results/trace_results.py: what compare, export
and plot read), and the tables read those. Split is called faster or slower than unified only
where the interval over the paired serves says so, and on the CPU never (CPU_NOTE).
"""

from __future__ import annotations

from dataclasses import fields

import pandas as pd
from rich.console import Console

from attnbench.e2e.agreement import LOGIT_TOLERANCE
from attnbench.e2e.serve_metrics import ServeMeasures
from attnbench.results.atomic import replace_atomic
from attnbench.results.e2e_report import CPU_NOTE, e2e_markdown
from attnbench.results.tables import format_params
from attnbench.results.trace_results import THRESHOLD, metric_rows, metrics_table, strategy_verdicts
from attnbench.results.verdicts import on_cpu

DEFINITIONS = ("TTFT: first token - arrival; TPOT: (E2EL - TTFT) / (output tokens - 1), requests of more than one "
               "output token; ITL: every gap between a request's consecutive tokens, pooled; E2EL: last token - "
               "arrival; percentiles by linear interpolation; throughput over the duration, start to last token "
               "(vLLM's benchmarks/serve.py definitions)")
SERVES = ("per choice, before anything is timed: every graph bucket a step of the trace can reach captured, and an "
          "untimed check serve (its logits are the agreement's; on the CPU, where nothing is captured, it is also the "
          "first measured serve); then {serves} measured serves, in rounds whose order rotates; each metric is the median over the serves (min – max). Split vs unified: the ratio over the "
          "serves paired by round, its 95 % interval, and a verdict only where the interval clears a "
          f"{THRESHOLD:.0%} change")
AGREEMENT_COLUMNS = ["backend", "reference", "run", "verdict", "tokens_equal", "first_divergence", "max_logit_diff",
                     "logit_scale"]


def graphs_line(serves: pd.DataFrame) -> str:
    """How many graphs the measured serves captured, summed (0: every bucket was captured before timing)."""
    timed = serves[serves["verdict"].isin(["pass", "fail"])]
    captured = int(timed["graphs_captured_while_serving"].sum()) if not timed.empty else 0
    before = int(timed.groupby(["backend", "strategy"])["graphs_before_timing"].max().sum()) if not timed.empty else 0
    return (f"graphs captured before timing: {before}; during the {len(timed)} timed serves: {captured}"
            + ("" if not captured else " (their capture time is inside those serves' latencies)"))


def write_summary(run, rows: pd.DataFrame, metrics: pd.DataFrame, verdicts: pd.DataFrame, agreement: pd.DataFrame,
                  env: dict) -> None:
    e2e, trace = env.get("e2e", {}), env.get("trace", {})
    gpu = (env.get("gpu") or {}).get("name", "CPU")
    lines = [
        "# attnbench e2e --trace summary\n",
        f"- command: `{env.get('command', '')}`",
        f"- model: {e2e.get('model')} ({format_params(e2e.get('params_b'))}, {e2e.get('weights')}), {e2e.get('dtype')}, "
        f"block size {e2e.get('block_size')}, chunk size {e2e.get('chunk_size') or 'none (whole prefill)'}, "
        f"at most {e2e.get('max_num_seqs')} requests running",
        f"- trace: {trace.get('path')} ({trace.get('format')}, sha256 {str(trace.get('sha256'))[:16]}...), "
        f"{trace.get('requests_served')} of {trace.get('requests_in_file')} requests served, arrivals: "
        f"{trace.get('arrivals')}; output lengths forced (EOS ignored)",
        f"- device: {gpu}; torch {env.get('torch')}; attnbench {env.get('attnbench_version')}",
        *[f"- {b}: {note}" for b, note in (e2e.get("graphs") or {}).items()],
        f"- {DEFINITIONS}", f"- {SERVES.format(serves=e2e.get('serves'))}", f"- {graphs_line(rows)}",
        *([f"- {CPU_NOTE}"] if on_cpu(rows, {}) else []),
        "", e2e_markdown(metrics_table(metrics)),
        "## Split vs unified over the paired serves\n",
        e2e_markdown(verdicts, "{:.3f}") if not verdicts.empty else "_no backend served both strategies_\n",
        f"## Agreement of greedy tokens, check serves (MISMATCH: logit difference > {LOGIT_TOLERANCE} x logit spread "
        "where both serves had the same inputs)\n",
        e2e_markdown(agreement[[c for c in AGREEMENT_COLUMNS if c in agreement]], "{:.4g}") if not agreement.empty
        else "_none_\n",
    ]
    problems = rows[rows["verdict"] != "pass"]
    if not problems.empty:
        lines += ["## Serves that did not pass\n", e2e_markdown(problems[["backend", "strategy", "mode", "serve",
                                                                          "verdict", "reason"]])]
    run.write_text("summary.md", "\n".join(lines))


def save_csv(run, name: str, frame: pd.DataFrame) -> None:
    run.record(run.path / name)
    replace_atomic(run.path / name, lambda tmp: frame.to_csv(tmp, index=False))


def write_trace_outputs(run, rows: list[dict], requests: list[dict], agreements: list[dict], env: dict,
                        console: Console) -> None:
    """Every file of a served trace, through the run directory's record, and the console report."""
    measures = [f.name for f in fields(ServeMeasures)]
    frame = pd.DataFrame(rows)
    frame = frame[[c for c in frame if c not in measures] + [c for c in measures if c in frame]]
    metrics, cpu = metric_rows(frame), on_cpu(frame, {})
    verdicts = strategy_verdicts(frame, cpu)
    save_csv(run, "trace.csv", frame)
    save_csv(run, "requests.csv", pd.DataFrame(requests))
    save_csv(run, "results.csv", metrics)
    agreement = pd.DataFrame(agreements)
    if not agreement.empty:
        save_csv(run, "agreement.csv", agreement)
    write_summary(run, frame, metrics, verdicts, agreement, env)
    written = ["trace.csv", "requests.csv", "results.csv", *(["agreement.csv"] if not agreement.empty else []),
               "summary.md", "env.json"]
    if requests:
        from attnbench.results.e2e_trace_plot import plot_metrics, plot_trace  # matplotlib: once there is a picture

        for name, draw in (("trace_latency.png", lambda p: plot_trace(frame, pd.DataFrame(requests), p)),
                           ("trace_metrics.png", lambda p: plot_metrics(metrics, p))):
            run.record(run.path / name)
            written += [name] if draw(run.path / name) else []
    console.print(e2e_markdown(metrics_table(metrics)), highlight=False, soft_wrap=True)
    if not verdicts.empty:
        console.print(e2e_markdown(verdicts, "{:.3f}"), highlight=False, soft_wrap=True)
    console.print(graphs_line(frame), highlight=False, soft_wrap=True)
    if cpu:
        console.print(f"[yellow]note:[/] {CPU_NOTE}", highlight=False, soft_wrap=True)
    for a in agreements:
        console.print(f"agreement {a['backend']}: {a['run']} vs {a['reference']}: {a['verdict']} (tokens equal "
                      f"{a['tokens_equal']:.1%})", highlight=False, soft_wrap=True)
    console.print(f"results: {run.path}/" + ", ".join(written), highlight=False, soft_wrap=True)
