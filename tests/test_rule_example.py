"""results/examples/h200-rule, the H200 dispatch rule the docs point to: rule.json reads as a rule,
and its rule.py runs alone (standard library only) and agrees with rule.json's tree on steps of
every size the fit saw (a seeded draw; CPU, a second)."""

from __future__ import annotations

import random
from pathlib import Path

import pandas as pd
import pytest
from test_rule import run_alone

from attnbench.results.rule_cells import feature_values

pytest.importorskip("sklearn", reason="rule fit needs scikit-learn (the `rule` extra)")

from attnbench.results.rule_fit import predict  # noqa: E402
from attnbench.runs.rule import read_rule  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "results" / "examples" / "h200-rule"


def steps(count: int, seed: int = 0) -> list[dict]:
    """Steps of 0-64 decode rows on 1-40,000 KV tokens and 0-3 prefill chunks of 1-2,048 tokens."""
    rng = random.Random(seed)
    drawn = []
    for _ in range(count):
        chunks = rng.randint(0 if rng.random() < 0.5 else 1, 3)
        decode = rng.randint(0 if chunks else 1, 64)
        query = [rng.randint(1, 2048) for _ in range(chunks)]
        drawn.append({"decode_kv_lens": [rng.randint(1, 40_000) for _ in range(decode)], "prefill_query_lens": query,
                      "prefill_kv_lens": [q + rng.choice([0, rng.randint(1, 16_384)]) for q in query]})
    return drawn


def features(step: dict) -> dict:
    """FEATURES as a run's rows give them: the batch's query tokens include every decode row's drafts."""
    decode, query, kv = step["decode_kv_lens"], step["prefill_query_lens"], step["prefill_kv_lens"]
    lengths = decode + kv
    drafts = step.get("draft_tokens", 0)
    query_tokens = len(decode) + drafts + sum(query)
    return feature_values(len(decode), query_tokens, len(lengths), sum(lengths), max(lengths),
                          32, 8, 128, decode_kv=sum(decode), max_prefill_query=max(query, default=0),
                          decode_query=1 + drafts // len(decode) if decode else 0)


def test_the_example_rule_reads_and_names_where_it_holds():
    rule = read_rule(EXAMPLE)
    assert rule["gpu"] == ["NVIDIA H200"] and rule["fit"]["max_depth"] == 6
    assert set(rule["library_versions"]) >= {"vllm-fa3", "flashinfer"}
    assert rule["domain"] == {"shapes": [[32, 8, 128]], "max_decode_query_len": 4}  # fitted on 3 drafts at most


def test_rule_py_runs_alone_and_agrees_with_rule_json(tmp_path):
    drawn = steps(400)
    exported = run_alone(EXAMPLE / "rule.py", drawn, tmp_path)
    expected = predict(read_rule(EXAMPLE)["tree"], pd.DataFrame([features(s) for s in drawn]))
    assert exported == list(expected)
    assert len(set(exported)) >= 4  # the draw reaches several leaves, not one


def test_rule_py_counts_speculative_drafts_as_the_rows_do(tmp_path):
    """Decode rows of 1 + k query tokens (k = 1-3 drafts each, all accepted, as in the speculative trace
    it was fitted on): rule.py given the step's draft_tokens chooses what the tree chooses on the
    features a replay's rows carry for that step."""
    rng = random.Random(1)
    drawn = []
    for step in steps(200, seed=2):  # one argv string: 400 steps of this draw pass 128 KiB
        if step["decode_kv_lens"]:
            step["draft_tokens"] = rng.randint(1, 3) * len(step["decode_kv_lens"])
        drawn.append(step)
    exported = run_alone(EXAMPLE / "rule.py", drawn, tmp_path)
    expected = predict(read_rule(EXAMPLE)["tree"], pd.DataFrame([features(s) for s in drawn]))
    assert exported == list(expected)
    without = run_alone(EXAMPLE / "rule.py", [{**s, "draft_tokens": 0} for s in drawn], tmp_path)
    assert without != exported  # the drafts move steps across the tree's splits: leaving them out is not harmless


def test_rule_py_refuses_what_it_was_not_fitted_on(tmp_path):
    """Four drafts a row, or another attention shape: a ValueError, not a guess (run in a subprocess
    of the standard library alone, as an engine would)."""
    step = steps(1, seed=3)[0] | {"decode_kv_lens": [4096] * 8}
    with pytest.raises(AssertionError, match="at most 4 query token"):
        run_alone(EXAMPLE / "rule.py", [{**step, "draft_tokens": 4 * 8}], tmp_path)
    with pytest.raises(AssertionError, match=r"head dim\) in \[\(32, 8, 128\)\], not \(64, 8, 128\)"):
        run_alone(EXAMPLE / "rule.py", [{**step, "num_heads": 64}], tmp_path)
