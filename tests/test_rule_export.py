"""The exported rule.py computes a rule's features with the fit's own code: on every cell a fit saw,
its choose() (run alone, standard library only) answers what the fit predicts for that cell.

Why: the features were written twice (the fit's arithmetic on the rows' totals, and again in the
rule.py template on an engine's lengths), and two copies drift. rule.py now embeds
results/rule_features.py as it is. The cells here are real H200 steps (the example replay, each
cell a step of scenarios/traces/chat-high.jsonl, whose lengths choose() is given) and synthetic
steps with several prefill chunks and speculative drafts.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from attnbench.results import rule_features
from attnbench.results.rule_cells import read_cells
from attnbench.results.rule_fit import predict
from attnbench.traces.jsonl import read_trace
from rule_fixtures import EXAMPLE, ROOT, write_run
from test_rule import fitted, run_alone

pytest.importorskip("sklearn", reason="rule fit needs scikit-learn (the `rule` extra)")

from attnbench.results.rule_export import features_source, rule_py  # noqa: E402
from attnbench.runs.rule import read_rule  # noqa: E402

RULE_EXAMPLE = ROOT / "results" / "examples" / "h200-rule"


def step_lengths(batch) -> dict:
    """choose()'s arguments for one step of a trace: its decode rows' KV, its other rows' query and KV,
    and its draft tokens (each decode row's query tokens beyond its first)."""
    rows = list(zip(batch.query_lens, batch.kv_lens, batch.is_decode))
    return {"decode_kv_lens": [kv for _, kv, d in rows if d], "prefill_query_lens": [q for q, _, d in rows if not d],
            "prefill_kv_lens": [kv for _, kv, d in rows if not d], "draft_tokens": sum(q - 1 for q, _, d in rows if d)}


def test_rule_py_chooses_as_the_fit_predicts_on_every_h200_cell(tmp_path):
    rule, out = fitted(tmp_path, run=EXAMPLE)
    assert rule["features_lacking"] == []  # the older rows' context columns come from the trace
    cells = read_cells([EXAMPLE], None)
    batches = [step.batch() for step in read_trace(ROOT / "scenarios" / "traces" / "chat-high.jsonl").steps]
    lengths = [step_lengths(batches[int(cell.split("|")[1])]) for cell in cells.features.index]
    assert len(lengths) == 42
    exported = run_alone(out / "rule.py", lengths, tmp_path)
    assert exported == list(predict(rule["tree"], cells.features))
    assert len(set(exported)) >= 3


def chunked(index: int, prefill: int) -> dict:
    """Decode rows of three context lengths, two or three prefill chunks, drafts on every third cell."""
    decode = 3 + index % 4
    chunks = [prefill, prefill // 2 + 1] + ([7] if index % 2 else [])
    return {"decode_kv_lens": [256 * (1 + (index + r) % 5) for r in range(decode)], "prefill_query_lens": chunks,
            "prefill_kv_lens": [c + 64 * (index % 3) for c in chunks], "draft_tokens": 2 * decode if index % 3 == 0 else 0}


def varied_times(prefill: int) -> dict[str, float]:
    return {"vllm-fa3 unified": 1.0 + prefill / 100, "vllm-fa3 split": 2.0 + (prefill % 7) / 10,
            "flashinfer split": 1.5 + (prefill % 5) / 3}


def test_rule_py_chooses_as_the_fit_predicts_on_every_synthetic_cell(tmp_path):
    prefills = tuple(range(8, 400, 19))
    run = write_run(tmp_path / "run", prefills=prefills, times=varied_times, lengths_of=chunked, context_columns=True)
    rule, out = fitted(tmp_path, run=run)
    features = read_cells([run], None).features
    buckets = [int(cell.split(":")[1].split("|")[0]) for cell in features.index]  # the cells' order is read_cells'
    exported = run_alone(out / "rule.py", [chunked(b, prefills[b]) for b in buckets], tmp_path)
    assert exported == list(predict(rule["tree"], features))
    assert len(set(exported)) >= 2


def test_rule_py_embeds_the_fits_feature_code_and_the_example_is_its_rendering():
    source = features_source()
    assert source in (RULE_EXAMPLE / "rule.py").read_text()
    assert source.strip() and source in inspect.getsource(rule_features)
    assert "def feature_values(" in source and "def walk(" in source
    assert (RULE_EXAMPLE / "rule.py").read_text() == rule_py(read_rule(RULE_EXAMPLE))


def test_rule_features_is_the_standard_library_alone():
    """rule_features.py is pasted into rule.py whole: it must import nothing."""
    imports = [line for line in Path(rule_features.__file__).read_text().splitlines()
               if line.startswith(("import ", "from ")) and line != "from __future__ import annotations"]
    assert imports == []
