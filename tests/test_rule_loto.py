"""benchmarks/rule_loto.py: the noise-corrected oracle sees the bias of taking the fastest of noisy
medians where choices tie and none where they are far apart, and a held-out run is judged on its
own cells only (the synthetic replay runs of rule_fixtures; CPU, a few seconds).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rule_fixtures import write_run

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
pytest.importorskip("sklearn", reason="rule fit needs scikit-learn (the `rule` extra)")

from rule_loto import held_out, oracle_bias, resampled, table  # noqa: E402


def noisy_cells(gap: float, cells: int = 40) -> tuple[np.ndarray, pd.DataFrame, pd.Series]:
    """Two choices per cell, 10 samples each around 1 ms and 1 + gap ms (sd 0.02 ms)."""
    rng = np.random.default_rng(1)
    samples = np.stack([rng.normal(1.0, 0.02, (cells, 10)), rng.normal(1.0 + gap, 0.02, (cells, 10))], axis=1)
    times = pd.DataFrame(np.median(samples, axis=2), columns=["a x", "b x"])
    return samples, times, pd.Series(1.0, index=times.index)


def test_a_tie_biases_the_oracle_and_a_wide_gap_does_not():
    for gap, biased in ((0.0, True), (1.0, False)):
        samples, times, weights = noisy_cells(gap)
        bias = oracle_bias(lambda rng: resampled(samples, rng), times, weights, draws=50, seed=0)
        assert (bias > 0.05) if biased else abs(bias) < 0.01, (gap, bias)


def test_a_held_out_run_is_judged_on_its_own_cells(tmp_path):
    runs = [write_run(tmp_path / name) for name in ("a", "b", "c")]
    result = held_out(runs[0], runs[1:], 0, depth=1, min_leaf=0.05, draws=0, sigma=0.0, seed=0)
    assert set(result["picks"].index) == set(result["cells"].times.index)
    totals = result["totals"]
    assert totals["oracle"] <= totals["rule"] <= totals["vLLM default"] + 1e-9
    assert "| synthetic |" in table([result]).replace(".jsonl", "")


def test_select_chooses_its_settings_without_the_held_out_trace(tmp_path):
    """--select: the settings come from the other replays alone, so a held-out run that is not even
    there cannot change them; the choice is one of GRID."""
    from rule_loto import GRID, selected

    runs = [write_run(tmp_path / name) for name in ("atlas", "a", "b")]
    choice, inner = selected(runs[0], [*runs[1:], tmp_path / "never-read"], 2, seed=0)
    assert choice in GRID and inner >= 0
    assert selected(runs[0], [*runs[1:], runs[1]], 2, seed=0) == (choice, inner)


def test_losses_add_up_to_the_held_out_regret(tmp_path):
    """--losses: a held-out trace whose crossover lies elsewhere (split wins from 50 tokens, not 100)
    loses where the tree trained on the others still picks unified; the parts add up to its regret."""
    from rule_loto import losses

    def moved(prefill: int) -> dict[str, float]:
        return {"vllm-fa3 unified": 1.0 + prefill / 50, "vllm-fa3 split": 2.0, "flashinfer split": 3.0}

    runs = [write_run(tmp_path / "atlas"), write_run(tmp_path / "a"), write_run(tmp_path / "held", times=moved)]
    result = held_out(runs[0], runs[1:], 1, depth=1, min_leaf=0.0, draws=0, sigma=0.0, seed=0)
    regret = (result["totals"]["rule"] / result["totals"]["oracle"] - 1) * 100
    assert regret > 1
    text = losses(result)
    first = text.splitlines()[0]
    total, decode, other = (float(x) for x in (first.split(": ")[1].split(" %")[0], first.split("decode steps ")[1].split(" ")[0],
                                               first.split("other steps ")[1]))
    assert total == pytest.approx(regret, abs=0.01) and decode == 0.0 and other == pytest.approx(total, abs=0.01)
    assert "other steps: vllm-fa3 unified where vllm-fa3 split wins" in text
