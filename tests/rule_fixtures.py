"""Synthetic replay runs for the rule tests: cells with a known crossover, written as a replay writes them.

Each cell is a bucket of `steps` steps: `decode` decode rows on `decode_kv` KV tokens each, and one
prefill chunk of `prefill` tokens on `prefill_kv` (or what `lengths_of` makes; its `draft_tokens`,
speculative drafts summed over the decode rows, count with the batch's tokens). The columns are those of the H200 example's
results.csv (the first row is the template), so the rows pass the same checks as real ones.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "results" / "examples" / "h200-replay-chat-high"
CROSSOVER = 100  # prefill tokens: below it "vllm-fa3 unified" wins, above it "vllm-fa3 split"
PREFILLS = (8, 16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 256, 384, 512)


def synthetic_times(prefill: int) -> dict[str, float]:
    """ms per choice: unified grows with the prefill chunk, split is flat, flashinfer split is always 3."""
    return {"vllm-fa3 unified": 1.0 + prefill / 100, "vllm-fa3 split": 2.0, "flashinfer split": 3.0}


def cell_lengths(index: int, prefill: int) -> dict:
    decode = 4 + index % 3
    return {"decode_kv_lens": [512] * decode, "prefill_query_lens": [prefill], "prefill_kv_lens": [prefill + 64]}


def write_run(path: Path, prefills=PREFILLS, times=synthetic_times, verdict: str = "pass",
              choices: tuple[str, ...] | None = None, lengths_of=cell_lengths, context_columns: bool = False,
              **columns) -> Path:
    """A replay run directory (results.csv, buckets.csv, env.json) of one bucket per prefill size
    (or whatever `lengths_of(i, value)` makes of each value), bucket i standing for i + 1 steps;
    `columns` override the template's (mode="eager"). The template's rows predate the columns that
    tell a batch's decode context from its prefill chunks'; `context_columns` writes them."""
    template = pd.read_csv(EXAMPLE / "results.csv", dtype=str, keep_default_na=False).iloc[0]
    rows, steps = [], []
    for i, value in enumerate(prefills):
        lengths = lengths_of(i, value)
        kv = lengths["decode_kv_lens"] + lengths["prefill_kv_lens"]
        decode = len(lengths["decode_kv_lens"])
        drafts = lengths.get("draft_tokens", 0)  # speculative drafts, summed over the decode rows
        prefill = sum(lengths["prefill_query_lens"]) + drafts  # the batch's tokens beyond one a decode row
        context = {"decode_kv_tokens": sum(lengths["decode_kv_lens"]),
                   "max_prefill_query_len": max(lengths["prefill_query_lens"], default=0),
                   "decode_query_len": 1 + drafts // decode if decode else 0} if context_columns else {}
        for choice, ms in times(value).items():
            if choices is not None and choice not in choices:
                continue
            backend, strategy = choice.split(" ")
            rows.append({**template.to_dict(), "part": "bucket", "bucket": i, "step": sum(range(i + 1)), "steps": i + 1,
                         "kind": "mixed", "num_tokens": decode + prefill, "batch_tokens": decode + prefill,
                         "num_seqs": len(kv), "num_decode_seqs": decode, "decode_seqs": decode,
                         "max_kv_len": max(kv), "total_kv_tokens": sum(kv), "context": max(kv), "seed": i,
                         "backend": backend, "strategy": strategy, "median_ms": ms, "p10_ms": ms, "p90_ms": ms,
                         "verdict": verdict, "lengths_rule": f"synthetic bucket {i}", **context, **columns})
        steps += [(len(steps) + j, "mixed", decode, decode + prefill, sum(kv), i) for j in range(i + 1)]
    path.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(path / "results.csv", index=False)
    pd.DataFrame(steps, columns=["step", "kind", "decode_rows", "query_tokens", "kv_tokens", "bucket"]).to_csv(
        path / "buckets.csv", index=False)
    (path / "env.json").write_text('{"replay": {"trace": "synthetic"}}\n')
    return path
