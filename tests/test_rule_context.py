"""The rule's context features: a crossover in the decode rows' context that every batch total hides.

Each synthetic cell has 4 decode rows of D KV tokens, a 32-token chunk on a 16384-token prefix and
a 32-token chunk on 12288 - 4 D: the query tokens, the sequences, the total, the longest and the
mean KV length are the same in every cell, so only the decode rows' KV (decode_kv_tokens, read off
the rows' own column) tells the cells apart. unified costs 1 + 4 D / 2000 ms and split 2 ms: they
cross at D = 500. With the column the tree finds the crossover and loses nothing, and the exported
rule.py agrees with it on every cell; rows written before the column existed fit without it, say
so, and cannot do better than one choice; a rule that splits on it is refused on such rows.
"""

from __future__ import annotations

import json

import pytest

from attnbench.results.rule_cells import feature_values, read_cells
from attnbench.results.rule_fit import predict
from bad_input_cli import invoke
from rule_fixtures import write_run
from test_rule import fitted, run_alone

pytest.importorskip("sklearn", reason="rule fit needs scikit-learn (the `rule` extra)")

DECODE_KV = (64, 128, 256, 384, 448, 576, 768, 1024, 1536, 2048)  # per decode row; the crossover is at 500


def hidden_lengths(index: int, decode_kv: int) -> dict:
    return {"decode_kv_lens": [decode_kv] * 4, "prefill_query_lens": [32, 32],
            "prefill_kv_lens": [16384, 12288 - 4 * decode_kv]}


def decode_context_times(decode_kv: int) -> dict[str, float]:
    return {"vllm-fa3 unified": 1.0 + 4 * decode_kv / 2000, "vllm-fa3 split": 2.0, "flashinfer split": 3.0}


def hidden_run(path, context_columns: bool):
    return write_run(path, prefills=DECODE_KV, times=decode_context_times, lengths_of=hidden_lengths,
                     context_columns=context_columns)


def test_the_totals_are_the_same_in_every_cell(tmp_path):
    cells = read_cells([hidden_run(tmp_path / "run", True)], None)
    totals = cells.features.drop(columns=["decode_kv_tokens", "mean_decode_kv_len", "prefill_kv_tokens"])
    assert (totals.nunique() == 1).all(), totals.nunique()
    assert cells.lacking == []


def test_the_tree_finds_a_crossover_in_the_decode_context(tmp_path):
    run = hidden_run(tmp_path / "run", True)
    rule, out = fitted(tmp_path, "--max-depth", "1", run=run)
    tree = rule["tree"]
    as_decode_kv = {"decode_kv_tokens": lambda t: t / 4, "mean_decode_kv_len": lambda t: t,
                    "prefill_kv_tokens": lambda t: (28672 - t) / 4}  # all three say the same of these cells
    assert tree["feature"] in as_decode_kv, tree
    crossover = as_decode_kv[tree["feature"]](tree["threshold"])
    assert max(d for d in DECODE_KV if d < 500) <= crossover <= min(d for d in DECODE_KV if d > 500)
    assert rule["regret_pct"]["trace of synthetic"]["rule, fitted [per cell]"] == 0.0
    assert rule["features_lacking"] == []
    cells = [hidden_lengths(i, d) for i, d in enumerate(DECODE_KV)]
    features = read_cells([run], None).features
    assert run_alone(out / "rule.py", cells, tmp_path) == list(predict(tree, features))
    by_hand = [feature_values(4, 68, 6, 28672, 16384, 32, 8, 128, 4 * d, 32, 1) for d in DECODE_KV]
    assert [{k: row[k] for k in by_hand[0]} for row in features.to_dict("records")] == by_hand


def test_older_rows_fit_without_the_context_and_say_so(tmp_path):
    old = hidden_run(tmp_path / "old", False)
    result = invoke("rule", "fit", old, "--out", tmp_path / "rule", "--max-depth", "1")
    assert result.exit_code == 0, result.output
    assert "Fitted without decode_kv_tokens, mean_decode_kv_len, prefill_kv_tokens, max_prefill_query_len, " \
        "decode_query_len" in " ".join(result.output.split())
    rule = json.loads((tmp_path / "rule" / "rule.json").read_text())
    assert rule["features_lacking"] == ["decode_kv_tokens", "mean_decode_kv_len", "prefill_kv_tokens",
                                        "max_prefill_query_len", "decode_query_len"]
    assert rule["domain"]["max_decode_query_len"] is None  # the rows cannot tell it: rule.py sets no limit
    regrets = rule["regret_pct"]["trace of synthetic"]
    assert regrets["rule, fitted [per cell]"] == regrets["best single choice [vllm-fa3 split]"] > 0
    assert "Fitted without decode_kv_tokens" in (tmp_path / "rule" / "summary.md").read_text()


def test_a_rule_on_the_context_is_refused_on_rows_without_it(tmp_path):
    _, out = fitted(tmp_path, "--max-depth", "1", run=hidden_run(tmp_path / "run", True))
    result = invoke("rule", "apply", out, hidden_run(tmp_path / "old", False))
    assert result.exit_code != 0
    message = " ".join(result.output.split())
    assert "the rule splits on" in message and "which the rows lack (written by an older attnbench)" in message
    assert "Traceback" not in result.output
