"""What `attnbench e2e --trace` writes and prints: trace.csv, requests.csv, agreement.csv, summary.md, a plot.

Why apart from e2e_report.py: a served trace has no grid point and no p50 over runs; its rows are
vllm bench serve's metrics per backend x strategy x mode (e2e/serve_metrics.py), and its table
reads them. One measured serve per choice has no interval, so no row is called faster than
another; the ratio column is a number to read, and on the CPU not even that (CPU_NOTE).
"""

from __future__ import annotations

import math
from dataclasses import fields

import pandas as pd
from rich.console import Console

from attnbench.e2e.agreement import LOGIT_TOLERANCE
from attnbench.e2e.serve_metrics import ServeMeasures
from attnbench.results.atomic import replace_atomic
from attnbench.results.e2e_report import CPU_NOTE, e2e_markdown
from attnbench.results.tables import format_params
from attnbench.results.verdicts import on_cpu

DEFINITIONS = ("TTFT: first token - arrival; TPOT: (E2EL - TTFT) / (output tokens - 1), requests of more than one "
               "output token; ITL: every gap between a request's consecutive tokens, pooled; E2EL: last token - "
               "arrival; percentiles by linear interpolation; throughput over the duration, start to last token "
               "(vLLM's benchmarks/serve.py definitions)")
ONE_SERVE = ("one measured serve per choice (on a GPU after an untimed check serve): no interval, so no choice is called "
             "faster; how far a second serve would move the numbers is not measured here (run the command twice)")
SHOWN = {"backend": "backend", "strategy": "strategy", "mode": "mode", "requests": "requests",
         "duration_s": "duration s", "request_throughput": "req/s", "output_throughput": "out tok/s",
         "ttft_p50_ms": "TTFT p50 ms", "ttft_p99_ms": "TTFT p99 ms", "tpot_p50_ms": "TPOT p50 ms",
         "tpot_p99_ms": "TPOT p99 ms", "itl_p50_ms": "ITL p50 ms", "itl_p99_ms": "ITL p99 ms",
         "e2el_p50_ms": "E2EL p50 ms", "e2el_p99_ms": "E2EL p99 ms", "agreement": "agreement", "verdict": "check"}
AGREEMENT_COLUMNS = ["backend", "reference", "run", "verdict", "tokens_equal", "first_divergence", "max_logit_diff",
                     "logit_scale"]


def trace_table(rows: pd.DataFrame) -> pd.DataFrame:
    """One line per served choice, vllm bench serve's numbers, and each TPOT p50 over unified's of
    the same backend and mode (blank on the CPU)."""
    served = rows[rows["verdict"].isin(["pass", "fail"])]
    if served.empty:
        return pd.DataFrame()
    table = served[[c for c in SHOWN if c in served]].rename(columns=SHOWN).reset_index(drop=True)
    unified = served[served["strategy"] == "unified"].set_index(["backend", "mode"])["tpot_p50_ms"]
    ratio = [row.tpot_p50_ms / unified.get((row.backend, row.mode), math.nan) for row in served.itertuples()]
    if not on_cpu(rows, {}) and len(set(served["strategy"])) > 1:
        table["TPOT p50 / unified"] = ratio
    return table


def write_summary(run, rows: pd.DataFrame, agreement: pd.DataFrame, env: dict) -> None:
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
        f"- {DEFINITIONS}", f"- {ONE_SERVE}",
        *([f"- {CPU_NOTE}"] if on_cpu(rows, {}) else []),
        "", e2e_markdown(trace_table(rows), "{:.3f}"),
        f"## Agreement of greedy tokens, check serves (MISMATCH: logit difference > {LOGIT_TOLERANCE} x logit spread "
        "where both serves had the same inputs)\n",
        e2e_markdown(agreement[[c for c in AGREEMENT_COLUMNS if c in agreement]], "{:.4g}") if not agreement.empty
        else "_none_\n",
    ]
    problems = rows[rows["verdict"] != "pass"]
    if not problems.empty:
        lines += ["## Rows that did not pass\n", e2e_markdown(problems[["backend", "strategy", "mode", "verdict",
                                                                        "reason"]])]
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
    save_csv(run, "trace.csv", frame)
    save_csv(run, "requests.csv", pd.DataFrame(requests))
    agreement = pd.DataFrame(agreements)
    if not agreement.empty:
        save_csv(run, "agreement.csv", agreement)
    write_summary(run, frame, agreement, env)
    written = ["trace.csv", "requests.csv", *(["agreement.csv"] if not agreement.empty else []), "summary.md",
               "env.json"]
    if requests:
        from attnbench.results.e2e_trace_plot import plot_trace  # matplotlib: once there is something to draw

        run.record(run.path / "trace_latency.png")
        written.append(plot_trace(frame, pd.DataFrame(requests), run.path / "trace_latency.png").name)
    console.print(e2e_markdown(trace_table(frame), "{:.3f}"), highlight=False, soft_wrap=True)
    if on_cpu(frame, {}):
        console.print(f"[yellow]note:[/] {CPU_NOTE}", highlight=False, soft_wrap=True)
    for a in agreements:
        console.print(f"agreement {a['backend']}: {a['run']} vs {a['reference']}: {a['verdict']} (tokens equal "
                      f"{a['tokens_equal']:.1%})", highlight=False, soft_wrap=True)
    console.print(f"results: {run.path}/" + ", ".join(written), highlight=False, soft_wrap=True)
