"""`attnbench rule fit`: the tree finds a known crossover, its regret and the static choices' are
what a hand computation says, and the exported rule.py (run alone, standard library only) agrees
with the fitted tree on every cell. CPU only: the fit reads saved rows.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pandas as pd
import pytest

from attnbench.results.rule_cells import read_cells
from attnbench.results.rule_fit import predict, regret
from bad_input_cli import invoke
from rule_fixtures import CROSSOVER, EXAMPLE, PREFILLS, cell_lengths, synthetic_times, write_run

pytest.importorskip("sklearn", reason="rule fit needs scikit-learn (the `rule` extra)")


def fitted(tmp_path, *flags, run=None):
    run = run or write_run(tmp_path / "run")
    result = invoke("rule", "fit", run, "--out", tmp_path / "rule", *flags)
    assert result.exit_code == 0, result.output
    return json.loads((tmp_path / "rule" / "rule.json").read_text()), tmp_path / "rule"


def hand_totals() -> dict[str, float]:
    """Each static choice's and the oracle's total, bucket i weighing i + 1 steps, written plainly."""
    totals = {"oracle": 0.0}
    for i, prefill in enumerate(PREFILLS):
        times = synthetic_times(prefill)
        for choice, ms in times.items():
            totals[choice] = totals.get(choice, 0.0) + (i + 1) * ms
        totals["oracle"] += (i + 1) * min(times.values())
    return totals


def test_the_tree_finds_the_crossover_and_loses_nothing(tmp_path):
    rule, _ = fitted(tmp_path, "--max-depth", "1")
    tree = rule["tree"]
    below = max(p for p in PREFILLS if p < CROSSOVER)
    above = min(p for p in PREFILLS if p > CROSSOVER)
    assert tree["feature"] == "prefill_tokens" and below <= tree["threshold"] < above
    assert (tree["le"]["choice"], tree["gt"]["choice"]) == ("vllm-fa3 unified", "vllm-fa3 split")
    regrets = rule["regret_pct"]["trace of synthetic"]
    assert regrets["rule, fitted [per cell]"] == 0.0
    hand = hand_totals()
    for choice in ("vllm-fa3 unified", "vllm-fa3 split", "flashinfer split"):
        expected = (hand[choice] - hand["oracle"]) / hand["oracle"] * 100
        assert regrets[f"always [{choice}]"] == pytest.approx(expected, abs=1e-3)
    assert regrets["best single choice [vllm-fa3 split]"] == pytest.approx(
        (hand["vllm-fa3 split"] - hand["oracle"]) / hand["oracle"] * 100, abs=1e-3)
    assert regrets["vLLM's default (vllm-fa3 unified) [vllm-fa3 unified]"] == regrets["always [vllm-fa3 unified]"]
    assert regrets["rule, cross-validated [per cell]"] < regrets["best single choice [vllm-fa3 split]"]


def run_alone(rule_py, cells: list[dict], cwd) -> list[str]:
    """choose() of rule.py on each cell's lengths, in `python -I` that never imports attnbench."""
    script = ("import json, runpy, sys\nchoose = runpy.run_path(sys.argv[1])['choose']\n"
              "print(json.dumps([list(choose(c['decode_kv_lens'], c['prefill_query_lens'], c['prefill_kv_lens'], "
              "c.get('num_heads', 32), c.get('num_kv_heads', 8), c.get('head_dim', 128), c.get('draft_tokens', 0))) "
              "for c in json.loads(sys.argv[2])]))\n"
              "assert not any(name.startswith('attnbench') for name in sys.modules)\n")
    done = subprocess.run([sys.executable, "-I", "-c", script, str(rule_py), json.dumps(cells)],
                          capture_output=True, text=True, cwd=cwd, timeout=60)
    assert done.returncode == 0, done.stderr
    return [" ".join(pair) for pair in json.loads(done.stdout)]


def test_rule_py_runs_alone_and_agrees_with_the_tree_on_every_cell(tmp_path):
    rule, out = fitted(tmp_path, "--max-depth", "3")
    cells = [cell_lengths(i, p) for i, p in enumerate(PREFILLS)]
    exported = run_alone(out / "rule.py", cells, tmp_path)
    features = pd.DataFrame([{
        "decode_rows": len(c["decode_kv_lens"]), "prefill_tokens": sum(c["prefill_query_lens"]),
        "decode_share": len(c["decode_kv_lens"]) / (len(c["decode_kv_lens"]) + sum(c["prefill_query_lens"])),
        "num_seqs": len(c["decode_kv_lens"]) + 1, "total_kv_tokens": sum(c["decode_kv_lens"] + c["prefill_kv_lens"]),
        "max_kv_len": max(c["decode_kv_lens"] + c["prefill_kv_lens"]),
        "mean_kv_len": sum(c["decode_kv_lens"] + c["prefill_kv_lens"]) / (len(c["decode_kv_lens"]) + 1),
        "num_heads": 32, "gqa_group": 4.0, "head_dim": 128} for c in cells])
    assert exported == list(predict(rule["tree"], features))
    assert exported == ["vllm-fa3 unified" if p < CROSSOVER else "vllm-fa3 split" for p in PREFILLS]


def test_regret_against_a_hand_computation():
    times = pd.DataFrame({"a": [1.0, 3.0, math.nan], "b": [2.0, 1.0, 4.0], "c": [5.0, 5.0, 5.0]},
                         index=["x", "y", "z"])
    weights = pd.Series([2.0, 1.0, 1.0], index=times.index)
    picks = pd.Series(["a", "a", "a"], index=times.index)  # "a" did not pass on z: it costs z's slowest, 5
    total, oracle, pct = regret(times, weights, picks)
    assert (total, oracle) == (2 * 1 + 3 + 5, 2 * 1 + 1 + 4)
    assert pct == pytest.approx((10 - 7) / 7 * 100)


def test_the_h200_example_fits_and_beats_every_static_choice(tmp_path):
    rule, out = fitted(tmp_path, run=EXAMPLE)
    regrets = rule["regret_pct"]["trace of scenarios/traces/chat-high.jsonl"]
    statics = [v for k, v in regrets.items() if k.startswith("always") and v is not None]
    assert regrets["rule, cross-validated [per cell]"] < min(statics)
    assert rule["gpu"] == ["NVIDIA H200"] and (out / "rule_regret.png").stat().st_size > 0
    assert "## The rule" in (out / "summary.md").read_text()


def test_apply_judges_a_rule_on_other_rows_even_choices_they_lack(tmp_path):
    _, out = fitted(tmp_path, run=EXAMPLE)
    other = write_run(tmp_path / "other", choices=("vllm-fa3 split", "flashinfer split"), context_columns=True)
    result = invoke("rule", "apply", out, other)
    assert result.exit_code == 0, result.output
    assert "| rule | per cell |" in result.stdout and "trace of synthetic" in result.stdout


def test_force_over_an_earlier_rule_keeps_what_it_did_not_write(tmp_path):
    _, out = fitted(tmp_path)
    (out / "notes.txt").write_text("mine")
    again = invoke("rule", "fit", tmp_path / "run", "--out", out, "--force", "--max-depth", "1")
    assert again.exit_code == 0, again.output
    assert (out / "notes.txt").read_text() == "mine" and (out / "rule.py").is_file()


def test_a_cpu_run_is_said_to_be_a_demo_before_its_regrets(tmp_path):
    """CPU timings are a pipeline demo: the console says so before any regret, as summary.md does."""
    run = write_run(tmp_path / "run", device="cpu", gpu="cpu")
    result = invoke("rule", "fit", run, "--out", tmp_path / "rule")
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    demo = next(i for i, line in enumerate(lines) if "pipeline demo" in line)
    assert demo < next(i for i, line in enumerate(lines) if "over the oracle" in line)
    assert "pipeline demo" in (tmp_path / "rule" / "summary.md").read_text()
    gpu = invoke("rule", "fit", write_run(tmp_path / "gpu"), "--out", tmp_path / "rule-gpu")
    assert gpu.exit_code == 0 and "pipeline demo" not in gpu.output


def with_sampled_steps(run, tmp_path, prefills=(10, 50, 90, 150, 300, 700)):
    """`run` plus sampled steps as a replay writes them (part "sample", each its own step)."""
    extra = pd.read_csv(write_run(tmp_path / "sampled", prefills=prefills) / "results.csv", dtype=str, keep_default_na=False)
    extra = extra.assign(part="sample", step=(1000 + extra["bucket"].astype(int)).astype(str), steps="1")
    rows = pd.read_csv(run / "results.csv", dtype=str, keep_default_na=False)
    pd.concat([rows, extra], ignore_index=True).to_csv(run / "results.csv", index=False)
    return run


def test_apply_sampled_judges_the_rule_on_steps_timed_one_by_one(tmp_path):
    """Fitted on the buckets, judged on the sampled steps, each weighing 1: the crossover holds, so
    the rule loses nothing; each static choice's regret is the sample's own sum, by hand."""
    run = with_sampled_steps(write_run(tmp_path / "run"), tmp_path)
    _, out = fitted(tmp_path, "--max-depth", "1", run=run)
    result = invoke("rule", "apply", out, run, "--sampled")
    assert result.exit_code == 0, result.output
    prefills = (10, 50, 90, 150, 300, 700)
    totals = {c: sum(synthetic_times(p)[c] for p in prefills) for c in synthetic_times(0)}
    oracle = sum(min(synthetic_times(p).values()) for p in prefills)
    assert f"| per-cell oracle | per cell | {oracle:.4f} | 0.00 |" in result.stdout
    assert f"| rule | per cell | {oracle:.4f} | 0.00 |" in result.stdout
    split = (totals["vllm-fa3 split"] - oracle) / oracle * 100
    assert f"| always | vllm-fa3 split | {totals['vllm-fa3 split']:.4f} | {split:.2f} |" in result.stdout


def test_apply_sampled_needs_sampled_steps(tmp_path):
    _, out = fitted(tmp_path, "--max-depth", "1")
    result = invoke("rule", "apply", out, tmp_path / "run", "--sampled")
    assert result.exit_code != 0 and "holds no sampled step rows (replay it with --exact-sample N)" in result.output
    assert "Traceback" not in result.output


def test_apply_says_when_the_rows_ran_elsewhere_or_on_other_library_versions(tmp_path):
    _, out = fitted(tmp_path)  # the synthetic rows: every backend at the template row's version, on an H200
    same = invoke("rule", "apply", out, write_run(tmp_path / "same"))
    assert same.exit_code == 0, same.output
    assert "note:" not in same.stdout
    moved = invoke("rule", "apply", out, write_run(tmp_path / "moved", gpu="NVIDIA B200", library_version="0.99.0"))
    assert moved.exit_code == 0, moved.output
    text = " ".join(moved.stdout.split())
    assert "fitted on NVIDIA H200, these rows ran on NVIDIA B200" in text
    assert "library versions differ: flashinfer 0.24.0 (the rule) against 0.99.0 (these rows)" in text


def test_the_commands_default_depth_is_the_fits(tmp_path):
    """`rule fit` without --max-depth fits at rule_fit.DEPTH (the CLI spells its default out: keep the two one)."""
    from attnbench.results.rule_fit import DEPTH

    rule, _ = fitted(tmp_path)
    assert rule["fit"]["max_depth"] == DEPTH
