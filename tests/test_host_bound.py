"""Eager kernel rows whose change may be the host's: compare shows it but calls it `host-bound`, not
slower or faster, where the row waited on its host in both runs (1.25x its graph row) or where its
graph row, the same kernel, is `same`; calibrate leaves the first kind out of its threshold
(results/verdicts.py).

On the H200 two runs of the same command, one after the other, moved small eager rows well past the
threshold with tight replicates while their graph rows agreed, some of them under 1.25x their graph
row in one run (docs/measurements/h200/ab.md, "The README's main command with replicates that stop");
these tests plant that shape.
"""

from __future__ import annotations

import pandas as pd
import pytest
from test_compare import replicated, shown_not_judged, write_run

from attnbench.results import compare
from attnbench.results.calibrate import calibrate_pair
from attnbench.results.read import KERNEL, canonical
from attnbench.results.verdicts import HOST_BOUND, host_bound

pytest_plugins = ["results_fixtures"]


def point(graph_ms: float, eager_ms: float, tokens: int = 100, seed: int = 0) -> list[dict]:
    """A point's graph and eager rows, each of three tight replicates."""
    return [replicated([ms * f for f in (1.0, 1.002, 0.998)], seed=seed + i, num_tokens=tokens, mode=mode, decode_seqs=0)
            for i, (mode, ms) in enumerate((("graph", graph_ms), ("eager", eager_ms)))]


def verdicts(base: list[dict], new: list[dict]) -> dict[tuple[int, str], str]:
    result = compare.compare_runs(pd.DataFrame(base), pd.DataFrame(new), 0.05)
    return {(r.num_tokens, r.mode): r.verdict for r in result.rows.itertuples()}


def test_an_eager_row_far_above_its_graph_row_is_host_bound_not_faster_or_slower():
    """Even where its graph row moved too: the kernel's change is the graph row's to judge."""
    base = point(0.010, 0.050) + point(1.0, 1.02, tokens=1000, seed=4)
    for factor, plain in ((0.65, "faster"), (1.35, "slower")):
        new = point(0.010 * factor, 0.050 * factor, seed=8) + point(1.0 * factor, 1.02 * factor, tokens=1000, seed=12)
        assert verdicts(base, new) == {(100, "graph"): plain, (100, "eager"): "host-bound",
                                       (1000, "graph"): plain, (1000, "eager"): plain}


def test_an_eager_row_that_moved_while_its_graph_row_stayed_the_same_is_host_bound():
    """Under 1.25x its graph row in one run or both: its kernel did not change, the host's part did
    (what an A/A pair does on the H200, and what a host-side regression does; ab tells them apart)."""
    base, new = point(0.010, 0.011), point(0.010, 0.030, seed=8)  # 1.25x in NEW only
    assert verdicts(base, new) == {(100, "graph"): "same", (100, "eager"): "host-bound"}
    assert verdicts(new, base)[(100, "eager")] == "host-bound"
    base, new = point(0.020, 0.021), point(0.020, 0.024, seed=8)  # under 1.25x in both
    assert verdicts(base, new)[(100, "eager")] == "host-bound"
    assert verdicts(base, point(0.020, 0.021, seed=8))[(100, "eager")] == "same"


def test_an_eager_row_that_moved_where_its_graph_row_is_noisy_is_host_bound():
    """The graph row's own interval cannot rule out a small kernel change, but not the eager row's."""
    base = point(0.010, 0.012)  # eager 1.2x its graph row here: under HOST_BOUND
    base[0] = replicated([0.010, 0.0104, 0.0096], seed=0, num_tokens=100, mode="graph", decode_seqs=0)
    new = point(0.010, 0.0145, seed=8)
    new[0] = replicated([0.0101, 0.0097, 0.0105], seed=8, num_tokens=100, mode="graph", decode_seqs=0)
    assert verdicts(base, new) == {(100, "graph"): "noisy", (100, "eager"): "host-bound"}


def test_an_eager_row_is_judged_as_usual_where_its_graph_row_moved_or_is_missing():
    base, new = point(0.010, 0.011), point(0.014, 0.030, seed=8)  # the kernel moved: slower in both modes
    assert verdicts(base, new) == {(100, "graph"): "slower", (100, "eager"): "slower"}
    alone = [row for row in point(0.010, 0.011) if row["mode"] == "eager"]
    assert verdicts(alone, [row for row in point(0.010, 0.030, seed=8) if row["mode"] == "eager"]) == \
        {(100, "eager"): "slower"}


@pytest.mark.parametrize("eager_over_graph, expected", [(HOST_BOUND, True), (HOST_BOUND * 0.99, False)])
def test_the_factor_is_the_eager_row_over_the_graph_row_of_the_same_point(eager_over_graph, expected):
    frame = pd.DataFrame(point(0.02, 0.02 * eager_over_graph) + point(0.02, 0.5, tokens=500)[1:])  # 500: no graph row
    labels = host_bound(frame, [c for c in KERNEL.key if c != "mode"], "median_ms", canonical)
    assert labels == ({1} if expected else set())


def test_the_cli_passes_the_gate_names_the_rows_and_says_why(tmp_path, cli):
    base = write_run(tmp_path / "base", point(0.010, 0.050))
    new = write_run(tmp_path / "new", point(0.010, 0.070, seed=8))  # eager 40 % slower, graph the same
    shown_not_judged(cli, tmp_path, base, new, "0 slower, 0 faster, 1 host-bound",
                     "1 eager row(s) took 1.25x or more their graph row in both runs", "host-bound")


def test_the_cli_says_which_eager_rows_moved_where_their_graph_row_did_not(tmp_path, cli):
    base = write_run(tmp_path / "base", point(0.020, 0.021))
    new = write_run(tmp_path / "new", point(0.020, 0.024, seed=8))  # eager 14 % slower, under 1.25x in both runs
    shown_not_judged(cli, tmp_path, base, new, "0 slower, 0 faster, 1 host-bound",
                     "1 eager row(s) would have been slower or faster where their graph row, the same kernel "
                     "replayed from the device, was not", "host-bound")


def test_calibrate_leaves_host_bound_rows_out_of_its_threshold():
    base = point(0.010, 0.050) + point(1.0, 1.02, tokens=1000, seed=4)
    new = point(0.010, 0.033, seed=8) + point(1.0, 1.02 * 1.03, tokens=1000, seed=12)
    result = calibrate_pair(pd.DataFrame(base), pd.DataFrame(new))
    assert 0.02 < result.clean < 0.06  # the 3 % eager row at 1000 tokens, not the 34 % host-bound one
    assert result.rows["host_bound"].sum() == 1
    assert any("host launching the call" in note for note in result.notes)
