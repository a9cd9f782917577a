"""benchmarks/oracle_repeat.py: the oracle's picks from one measurement, timed in another, cost
nothing where the choices are far apart and something where they tie and the measurements disagree
(synthetic replay runs of rule_fixtures with two replicates a row; CPU, a second)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from rule_fixtures import write_run

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from oracle_repeat import picked_elsewhere, replicate_tables  # noqa: E402


def with_replicates(path, swap: bool):
    """A run whose every row has two replicate medians; with swap, the two choices trade places
    between the replicates (a tie the two measurements break in opposite ways)."""
    run = write_run(path, times=lambda p: {"vllm-fa3 unified": 1.0, "vllm-fa3 split": 1.5 if not swap else 1.02})
    rows = pd.read_csv(run / "results.csv")
    second = rows["median_ms"].where(rows["strategy"] != "unified", 1.04) if swap else rows["median_ms"]
    rows["replicate_medians_ms"] = [f"{a} {b}" for a, b in zip(rows["median_ms"], second)]
    rows.to_csv(run / "results.csv", index=False)
    return run


@pytest.mark.parametrize("swap, costs", [(False, False), (True, True)])
def test_the_oracle_costs_what_the_other_measurement_says(tmp_path, swap, costs):
    tables = replicate_tables(with_replicates(tmp_path / "run", swap))
    weights = pd.Series(1.0, index=tables[0].index)
    cost = picked_elsewhere(tables[0], tables[1], weights)
    # swapped: picked unified at 1.0 on the first, it takes 1.04 on the second where split takes 1.02
    assert cost == pytest.approx(100 * (1.04 / 1.02 - 1)) if costs else cost == 0.0


def test_a_run_without_replicates_is_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "oracle_repeat.py"), str(write_run(tmp_path / "r"))],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "replay it with --replicates 2" in done.stderr and "Traceback" not in done.stderr
