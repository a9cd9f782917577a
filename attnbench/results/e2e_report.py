"""What an e2e run reports: the seed's table, summary.md, plots, and the outputs made from results.csv.

Agreement between runs is measured by the runner (e2e/agreement.py); this module reads the rows.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
from rich.console import Console

from attnbench.e2e.agreement import LOGIT_TOLERANCE, worst
from attnbench.e2e.rows import E2E_POINT
from attnbench.e2e.stopping import StoppingRule
from attnbench.errors import AttnbenchError
from attnbench.results.e2e_plots import ratio_intervals
from attnbench.results.files import load_results, write_parquet
from attnbench.results.tables import format_params, md_lines, ratio_names, strategies_in
from attnbench.results.verdicts import on_cpu



CPU_NOTE = ("CPU run: a pipeline demo (reference attention, perf_counter timing on a shared host): its latencies "
            "and ratios are no finding about unified or split")


def ratio_reading(strategy: str, low: float, high: float, on_cpu: bool) -> str:
    """What a ratio of p50s can say: only with an interval, and never on the CPU."""
    if on_cpu:
        return "CPU demo: no verdict"
    if not (low > 0 and high > 0):  # NaN: a side has no interval (fewer than 6 runs, or an older file)
        return "no interval (under 6 runs)"
    span = f"{low:.3f}-{high:.3f}"
    if low > 1:
        return f"unified faster ({span})"
    if high < 1:
        return f"{strategy} faster ({span})"
    return f"within noise ({span})"


def e2e_table(df: pd.DataFrame) -> pd.DataFrame:
    """The seed's e2e table: per (input, output, batch size), p50 request latency of each strategy,
    each strategy / unified, and what that ratio can say with its interval (e2e_plots.ratio_intervals:
    the run-by-run ratios' where strategies ran in turns, else from the two rows' intervals), no
    verdict on the CPU."""
    measured = df[df["verdict"].isin(["pass", "fail"])]
    if measured.empty:
        return pd.DataFrame()
    index = ["backend", "mode", *E2E_POINT]
    p50 = measured.pivot_table(index=index, columns="strategy", values="request_p50_s", aggfunc="first")
    table = pd.DataFrame(index=p50.index)
    present = strategies_in(p50.columns)
    for strategy in present:
        table[f"{strategy} p50 s"] = p50[strategy]
    cpu_rows = measured.groupby(index)["device"].agg(lambda v: (v == "cpu").any()) if "device" in measured else None
    for strategy, g in ratio_intervals(measured, index).groupby("strategy", sort=False):
        g = g.set_index(index).reindex(table.index)
        cpu = cpu_rows.reindex(table.index).fillna(False) if cpu_rows is not None else [False] * len(g)
        table[f"{strategy} / unified"] = g["ratio"]
        table[f"{strategy} vs unified"] = [ratio_reading(strategy, lo, hi, c) for lo, hi, c in zip(g["low"], g["high"], cpu)]
    table["agreement"] = measured.groupby(index)["agreement"].agg(lambda v: worst(v.dropna()))
    table["check"] = measured.groupby(index)["verdict"].agg(lambda v: "pass" if (v == "pass").all() else "FAIL")
    return table.reset_index().rename(columns={"input_len": "input len", "output_len": "output len",
                                               "batch_size": "batch size"})


def e2e_markdown(df: pd.DataFrame, floats: str = "{:.4f}") -> str:
    if df.empty:
        return "_no rows_\n"
    cell = lambda v: "" if v is None or (isinstance(v, float) and math.isnan(v)) else (  # noqa: E731
        floats.format(v) if isinstance(v, float) else str(v))
    rows = ([cell(v) for v in row] for row in df.itertuples(index=False))
    return "\n".join(md_lines(df.columns, rows)) + "\n"


STEP_COLUMNS = ["backend", "strategy", "mode", *E2E_POINT, "prefill_step_p50_ms", "mixed_step_p50_ms",
                "decode_step_p50_ms", "host_us_per_step", "prefill_launch_host_us", "decode_launch_host_us",
                "output_tok_s"]
AGREEMENT_COLUMNS = [*E2E_POINT, "backend", "reference", "run", "verdict", "tokens_equal", "first_divergence",
                     "max_logit_diff", "logit_scale", "margin_at_divergence"]


def ratio_words(df: pd.DataFrame) -> str:
    """How to read the ratio columns, naming the strategies the run has."""
    ratios = ratio_names(df["strategy"].dropna().unique() if "strategy" in df else [])
    return (f"{ratios} > 1 means unified is faster; the `vs unified` column reads it with its 95 % interval "
            "(of the run-by-run ratios where the strategies ran in turns, else from the two rows' intervals of "
            "the p50) or says why it cannot")


def runs_text(df: pd.DataFrame, e2e: dict) -> str:
    """Warm-ups and measured runs per row: the rule asked for and what the rows measured. An
    env.json from before the rule has no min_iters: its --iters were all measured."""
    warmup, most = e2e.get("warmup"), e2e.get("iters")
    rule = StoppingRule(e2e.get("min_iters") or most, most, e2e.get("precision") or 0)
    asked = f"{warmup} warm-up{'' if warmup == 1 else 's'}, then {rule.describe()}"
    counts = df["measured_runs"].dropna() if "measured_runs" in df else pd.Series(dtype=float)
    if rule.fixed or counts.empty:
        return asked
    return (f"{asked}; rows measured {int(counts.min())}-{int(counts.max())} (median {counts.median():g}), "
            f"{int((counts >= most).sum())} reached {most} before the precision")


def write_e2e_summary(df: pd.DataFrame, agreement: pd.DataFrame, out_dir: Path, env: dict) -> Path:
    e2e = env.get("e2e", {})
    gpu = (env.get("gpu") or {}).get("name", "CPU")
    notes = df["graph_note"].dropna().unique() if "graph_note" in df else []
    tp, heads = e2e.get("tp") or {}, e2e.get("attention_per_rank") or {}
    if tp.get("size", 1) > 1:  # the kernels' shape is one rank's: 64/8 heads at TP 2 are 32/4 per GPU
        notes = [f"tensor parallel: {tp['size']} ranks ({tp.get('backend')}), {heads.get('num_heads')}/"
                 f"{heads.get('num_kv_heads')} heads x {heads.get('head_dim')} per rank; times are rank 0's", *notes]
    lines = [
        "# attnbench e2e summary\n",
        f"- command: `{env.get('command', '')}`",
        f"- model: {e2e.get('model')} ({format_params(e2e.get('params_b'))}, {e2e.get('weights')}), "
        f"{e2e.get('dtype')}, block size {e2e.get('block_size')}, chunk size {e2e.get('chunk_size') or 'none (whole prefill)'}",
        f"- device: {gpu}; torch {env.get('torch')}; attnbench {env.get('attnbench_version')}",
        f"- per row: one untimed check run, {runs_text(df, e2e)}",
        *[f"- {note}" for note in notes],
        f"- small elementwise ops (RMSNorm, RoPE, SiLU-and-mul): {e2e.get('fused_ops')}",
        f"- request latency: run start to the request's last token; {ratio_words(df)}",
        *([f"- {CPU_NOTE}"] if on_cpu(df, {}) else []),
        "",
        e2e_markdown(e2e_table(df)),
        "## Step latency (p50; CUDA events on a GPU, perf_counter on the CPU; host = schedule + prepare + "
        "upload + plan; launch host = issuing the step's forward)\n",
        e2e_markdown(df[[c for c in STEP_COLUMNS if c in df]], "{:.3f}"),
        f"## Agreement of greedy tokens (MISMATCH: logit difference > {LOGIT_TOLERANCE} x logit spread "
        "where both runs had the same inputs)\n",
        e2e_markdown(agreement[[c for c in AGREEMENT_COLUMNS if c in agreement]], "{:.4g}") if not agreement.empty else "_none_\n",
    ]
    problems = df[df["verdict"] != "pass"]
    if not problems.empty:
        lines += ["## Rows that did not pass\n",
                  e2e_markdown(problems[["backend", "strategy", "mode", *E2E_POINT, "verdict", "reason"]])]
    path = out_dir / "summary.md"
    path.write_text("\n".join(lines))
    return path


def write_e2e_outputs(out_dir: Path, env: dict, console: Console) -> Path:
    """Parquet, summary.md, plots and the console report, all from the saved CSV files."""
    df = load_results(out_dir / "results.csv")
    if df.empty:
        raise AttnbenchError("no rows were measured")
    agreement_path = out_dir / "agreement.csv"
    agreement = pd.read_csv(agreement_path) if agreement_path.exists() else pd.DataFrame()
    write_parquet(df, out_dir)
    summary = write_e2e_summary(df, agreement, out_dir, env)
    from attnbench.results.e2e_plots import plot_e2e  # matplotlib: imported once there is something to draw

    plots = plot_e2e(df, out_dir)
    console.print(e2e_markdown(e2e_table(df)), highlight=False, soft_wrap=True)
    console.print(f"runs per row: {runs_text(df, env.get('e2e', {}))}", highlight=False, soft_wrap=True)
    if on_cpu(df, {}):
        console.print(f"[yellow]note:[/] {CPU_NOTE}", highlight=False, soft_wrap=True)
    if not agreement.empty:
        for a in agreement.itertuples(index=False):
            console.print(f"agreement in {a.input_len}/{a.output_len} batch {a.batch_size} {a.backend}: "
                          f"{a.run} vs {a.reference}: {a.verdict} (tokens equal {a.tokens_equal:.1%}, max logit diff "
                          f"{a.max_logit_diff:.3g} of spread {a.logit_scale:.3g}"
                          + (f", first divergence {a.first_divergence}" if isinstance(a.first_divergence, str) else "") + ")",
                          highlight=False, soft_wrap=True)
    verdicts = df["verdict"].value_counts().to_dict()
    console.print("rows: " + ", ".join(f"{v} {k}" for k, v in verdicts.items()))
    console.print(f"results: {out_dir}/results.csv, agreement.csv, {summary.name}, env.json, {len(plots)} plot(s)")
    return out_dir
