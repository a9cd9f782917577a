"""What a fitted rule is and what it costs, written down: the regret table, rule.json, rule.py, summary.md.

Why these three: rule.json is the tree as data (features, thresholds, the GPU and the library
versions it holds for, the runs it came from), for tools; rule.py (rendered from it by
rule_export.py) is the same tree with one standard-library function a serving engine can paste; summary.md puts the rule beside the static
choices a serving engine makes today (vLLM's default, FlashInfer's always-split, the best single
choice) and the per-cell oracle, each with its regret, on all cells and on each replayed trace.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pandas as pd

from attnbench.results.figures import CPU_MARK, is_cpu
from attnbench.results.rule_cells import Cells
from attnbench.results.rule_context import CONTEXT_COLUMNS
from attnbench.results.rule_features import FEATURES, refusal
from attnbench.results.rule_fit import BALANCES, WEIGHTINGS, regret, static_choices, tree_words, vllm_default

FLASHINFER_DEFAULT = "flashinfer split"


@dataclass(frozen=True)
class Line:
    """One row of a regret table: what chose, which choice (or "per cell"), total ms, regret %."""

    name: str
    choice: str
    total_ms: float
    regret_pct: float


def regret_lines(cells: Cells, scope: pd.Index, picks: dict[str, pd.Series]) -> list[Line]:
    """The oracle, each rule's picks (`picks`: name -> choice per cell), the static defaults and
    every single choice, over the cells of `scope`. A choice lacking a cell has no total (NaN)."""
    times, weights = cells.times.loc[scope], cells.weights.loc[scope]
    statics = static_choices(times, weights)
    oracle = regret(times, weights, times.idxmin(axis=1))[1]
    pct = lambda total: (total - oracle) / oracle * 100 if oracle and not math.isnan(total) else math.nan  # noqa: E731
    lines = [Line("per-cell oracle", "per cell", oracle, 0.0)]
    lines += [Line(name, "per cell", *regret(times, weights, p.loc[scope])[::2]) for name, p in picks.items()]
    named = {"best single choice": str(statics.index[0]) if not math.isnan(statics.iloc[0]) else None,
             f"vLLM's default ({vllm_default(cells.gpus)})": vllm_default(cells.gpus),
             f"FlashInfer's default ({FLASHINFER_DEFAULT})": FLASHINFER_DEFAULT}
    for name, choice in named.items():
        total = float(statics.get(choice, math.nan)) if choice else math.nan
        lines.append(Line(name, choice or "none complete", total, pct(total)))
    lines += [Line("always", str(c), float(t), pct(float(t))) for c, t in statics.items()]
    return lines


def table_md(lines: list[Line]) -> str:
    text = "| chooser | choice | total ms | regret % |\n|---|---|---:|---:|\n"
    for line in lines:
        total = "lacks a cell" if math.isnan(line.total_ms) else f"{line.total_ms:.4f}"
        pct = "" if math.isnan(line.regret_pct) else f"{line.regret_pct:.2f}"
        text += f"| {line.name} | {line.choice} | {total} | {pct} |\n"
    return text


def scopes(cells: Cells) -> dict[str, pd.Index]:
    """All cells, then each replay run's cells (its trace: each bucket weighs its steps)."""
    traces = {f"trace of {run['trace'] or run['path']}": cells.run_of.index[cells.run_of == number]
              for number, run in enumerate(cells.runs) if run["kind"] == "replay"}
    if len(cells.runs) == 1 and traces:  # one replay: its trace is all the cells
        return traces
    everything = "atlas cells" if all(run["kind"] == "atlas" for run in cells.runs) else "all cells"
    return {everything: cells.times.index, **traces}


def domain(cells: Cells) -> dict:
    """What the rule was fitted on, beyond which rule.py refuses to answer: the attention shapes, and
    the longest decode-row query (1 + drafts; None where the rows cannot tell it, and then no limit)."""
    longest = None
    if "decode_query_len" in cells.features:
        longest = int(max(cells.features["decode_query_len"].max(), 1))
    return {"shapes": [list(shape) for shape in cells.shapes], "max_decode_query_len": longest}


def outside(record: dict, features: pd.DataFrame) -> pd.Series:
    """The cells rule.py refuses (True): their shape, or their decode rows' query length, lies beyond
    the rule's domain (rule_features.refusal, the check rule.py makes). Rows that cannot tell the
    decode query length are refused by shape alone."""
    found = record["domain"]
    longest = found["max_decode_query_len"] if "decode_query_len" in features else None
    queries = features["decode_query_len"] if "decode_query_len" in features else pd.Series(0, index=features.index)
    kv = (features["num_heads"] / features["gqa_group"]).round()
    return pd.Series([refusal(found["shapes"], longest, int(h), int(k), int(d), q) is not None
                      for h, k, d, q in zip(features["num_heads"], kv, features["head_dim"], queries)],
                     index=features.index)


def rule_json(tree: dict, cells: Cells, fit: dict, tables: dict[str, list[Line]]) -> dict:
    return {"format": "attnbench-rule", "version": 1, "choose": "backend strategy", "tree": tree, "domain": domain(cells),
            "features": FEATURES, "features_lacking": cells.lacking, "choices": list(cells.times.columns), "gpu": cells.gpus,
            "library_versions": cells.libraries, "runs": cells.runs, "fit": fit,
            "regret_pct": {scope: {f"{l.name} [{l.choice}]": None if math.isnan(l.regret_pct) else round(l.regret_pct, 3)
                                   for l in lines} for scope, lines in tables.items()}}


CPU_NOTE = "the reference backend's CPU timings show the pipeline works and say nothing about a GPU"


def summary_md(tree: dict, cells: Cells, fit: dict, tables: dict[str, list[Line]]) -> str:
    cpu = f"**{CPU_MARK}**: {CPU_NOTE}.\n\n" if is_cpu(cells.about) else ""
    text = (f"# Dispatch rule\n\n{cpu}Fitted on {len(cells.times)} cell(s) ({fit['mode']} mode) of "
            f"{', '.join(r['path'] + ' (' + r['kind'] + ')' for r in cells.runs)}; GPU {', '.join(cells.gpus)}; "
            f"{', '.join(f'{b} {v}' for b, v in cells.libraries.items())}.\n\n"
            f"A decision tree of depth at most {fit['max_depth']}, "
            + (f"each leaf standing for at least {fit['min_leaf'] * 100:g} % of the weight"
               if fit.get("min_leaf") else "no floor on a leaf's share of the weight")
            + f" (kept weighting: {WEIGHTINGS[fit['weighting']]}; "
            f"runs balanced by {fit.get('balance', 'steps')}: {BALANCES[fit.get('balance', 'steps')]}), "
            f"each leaf answering the choice with the lowest time over its cells. Regret: time over the per-cell "
            f"oracle's, in percent. \"rule, cross-validated\" chooses each cell with a tree fitted without it "
            f"({fit['folds']}-fold, seed {fit['seed']}); \"rule, fitted\" with the tree below, which saw every cell.\n\n"
            + (f"{lacking_note(cells.lacking)}\n\n" if cells.lacking else "")
            + "## The rule\n\n```\n" + "\n".join(tree_words(tree)) + "\n```\n\n" + domain_md(cells))
    for scope, lines in tables.items():
        low, high = fit["cross_validated_range_pct"][scope]
        text += (f"\n## Regret: {scope}\n\n" + table_md(lines) + f"\nOver {fit['draws']} draws of the folds (seeds "
                 f"{fit['seed']}-{fit['seed'] + fit['draws'] - 1}) the cross-validated regret is {low:.2f}-{high:.2f} %.\n"
                 + (replay_oracle_note(lines) if scope.startswith("trace of") else ""))
    return text


def domain_md(cells: Cells) -> str:
    """The rule's domain in words: what rule.py refuses."""
    limits = domain(cells)
    shapes = ", ".join("/".join(str(v) for v in shape) for shape in limits["shapes"])
    longest = limits["max_decode_query_len"]
    drafts = (f"decode rows of at most {longest} query token(s) ({longest - 1} speculative draft(s))"
              if longest is not None else "decode rows of any query length (the rows could not tell it)")
    return (f"It holds for (heads / KV heads / head dim) {shapes} and {drafts}; rule.py raises ValueError "
            "outside that, and the engine's own default is the answer there.\n")


def lacking_note(lacking: list[str]) -> str:
    return (f"Fitted without {', '.join(lacking)}: some rows predate the columns they are read from "
            f"({', '.join(CONTEXT_COLUMNS)}), so the rule cannot tell the decode rows' context from "
            "the prefill chunks' (or speculative decode rows from plain ones). Measure again with this attnbench "
            "to give it them.")


def replay_oracle_note(lines: list[Line]) -> str:
    """On a replayed trace the per-cell oracle is the replay's per-step oracle: say so, with the
    saving `attnbench replay` quotes, so the two reports' numbers are read as one gap."""
    oracle, best = lines[0], next(l for l in lines if l.name == "best single choice")
    if math.isnan(best.total_ms) or not best.total_ms:
        return ""
    return (f"\nThe cells are the trace's representative steps, each weighed by the steps it stands for, so the "
            f"per-cell oracle is the per-step oracle of `attnbench replay`: it saves "
            f"{(1 - oracle.total_ms / best.total_ms) * 100:.2f} % over the best single choice ({best.choice}), the "
            f"same gap as that choice's {best.regret_pct:.2f} % regret, measured from the other end.\n")


def dumps(record: dict) -> str:
    return json.dumps(record, indent=1) + "\n"
