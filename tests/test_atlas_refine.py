"""The atlas's refinement on synthetic maps with known crossovers: a fake measure names the winner
from the coordinates (a crossover at a known value, noise near it), and refinement must bracket
each crossover within the stated tolerance with a bounded number of cells; ties are not chased;
a resumed exploration measures nothing twice. No device, no timing."""

from __future__ import annotations

import math
import random

import pytest

from attnbench.errors import UsageError
from attnbench.kernels.atlas_axes import AXES, BY_NAME, NAMES, TOLERANCE, cell_batch, parse_range
from attnbench.results.atlas_refine import CellOutcome, coarse_grid, edges, explore, next_cells

HEADS = 32


def ranges(**given):
    fixed = {"decode_share": "0.5", "decode_context": "1024", "chunk": "512", "prefill_context": "0",
             "gqa_group": "4", "head_dim": "128", "tokens": "256"}
    return [parse_range(a, given.get(a.name, fixed[a.name])) for a in AXES]


def fake(rule, noise: float = 0.0, seed: int = 0, seen: list | None = None):
    """measure(): the winner rule(cell) names; within `noise` (relative, in the axis's log) of a
    crossover a coin decides and the cell is a tie."""
    rng = random.Random(seed)

    def measure(coords):
        if seen is not None:
            seen.extend(coords)
        out = {}
        for c in coords:
            winner, closeness = rule(dict(zip(NAMES, c)))
            tie = closeness < noise
            out[c] = CellOutcome(rng.choice(["A", "B"]) if tie else winner, tie)
        return out
    return measure


def bracket_ok(found, axis: str, truth: float) -> list:
    """The located edges along `axis`: each holds the truth and is within the tolerance."""
    a = NAMES.index(axis)
    located = [e for e in found if e.axis == a and e.status in ("located", "resolution")]
    for e in located:
        low, high = e.low[a], e.high[a]
        assert low <= truth <= high, (low, high, truth)
        assert BY_NAME[axis].located(low, high) or e.status == "resolution"
    return located


def test_one_crossover_on_a_log_axis_is_bracketed_within_the_tolerance():
    r = ranges(decode_context="256:65536:5")
    truth = 3000.0
    rule = lambda c: ("A" if c["decode_context"] < truth else "B", abs(math.log(c["decode_context"] / truth)))  # noqa: E731
    result = explore(r, HEADS, {}, fake(rule), 1000)
    found = edges(r, result.cells, HEADS)
    assert len(bracket_ok(found, "decode_context", truth)) == 1
    assert "located" in result.stop
    # bisection: the coarse 5 plus about log2(span / tolerance) cells, not a fine grid
    assert len(result.cells) <= 5 + 12


def realized_share(c: dict) -> float:
    batch = cell_batch(tuple(c[n] for n in NAMES))
    return batch.num_decode_seqs / batch.num_tokens


def test_two_axes_each_crossover_is_found_on_every_line():
    r = ranges(decode_share="0:1:5", tokens="16:4096:4")
    share = 0.37  # of the step's real decode rows: round(tokens x decode_share) / tokens
    rule = lambda c: ("A" if realized_share(c) < share else "B", 1.0)  # noqa: E731
    result = explore(r, HEADS, {}, fake(rule), 1000)
    a = NAMES.index("decode_share")
    found = [e for e in edges(r, result.cells, HEADS) if e.axis == a]
    assert len(found) == 4 and {e.status for e in found} <= {"located", "resolution"}  # one per line of tokens
    for e in found:
        low, high = (realized_share(dict(zip(NAMES, c))) for c in (e.low, e.high))
        assert low < share <= high
        assert BY_NAME["decode_share"].located(e.low[a], e.high[a]) or e.status == "resolution"
    assert len(result.cells) <= 20 + 4 * 8


def test_noise_makes_ties_that_are_not_chased_and_the_run_stays_bounded():
    r = ranges(decode_context="64:65536:6", tokens="16:4096:5")
    truth = 5000.0
    rule = lambda c: ("A" if c["decode_context"] < truth else "B", abs(math.log(c["decode_context"] / truth)))  # noqa: E731
    result = explore(r, HEADS, {}, fake(rule, noise=0.15, seed=3), 1000)
    found = edges(r, result.cells, HEADS)
    assert not [e for e in found if e.status == "open"]
    assert any(o.tie for o in result.cells.values())
    for e in found:  # an edge between two ties is left alone; every other edge is located at the crossover
        if e.status == "tie":
            assert result.cells[e.low].tie and result.cells[e.high].tie
        else:
            a = e.axis
            low, high = e.low[a], e.high[a]
            assert BY_NAME["decode_context"].located(low, high) or e.status == "resolution"
    assert len(result.cells) <= 30 + 5 * 16


def test_a_discrete_axis_stops_at_its_resolution():
    r = ranges(gqa_group="1:32:3")  # 1, 5.66 -> snapped to a divisor of 32, 32
    rule = lambda c: ("A" if c["gqa_group"] < 6 else "B", 1.0)  # noqa: E731
    result = explore(r, HEADS, {}, fake(rule), 100)
    statuses = {e.status for e in edges(r, result.cells, HEADS)}
    assert statuses == {"resolution"}
    assert all(HEADS % c[NAMES.index("gqa_group")] == 0 for c in result.cells)


def test_the_cell_budget_ends_refinement_and_says_so():
    r = ranges(decode_context="256:65536:5")
    rule = lambda c: ("A" if c["decode_context"] < 3000 else "B", 1.0)  # noqa: E731
    result = explore(r, HEADS, {}, fake(rule), 7)
    assert len(result.cells) == 7
    assert "budget" in result.stop and "open" in result.stop


def test_resume_measures_nothing_twice():
    r = ranges(decode_context="256:65536:5", tokens="16:4096:3")
    rule = lambda c: ("A" if c["decode_context"] < 3000 else "B", 1.0)  # noqa: E731
    whole = explore(r, HEADS, {}, fake(rule), 1000)
    first_seen: list = []
    part = explore(r, HEADS, {}, fake(rule, seen=first_seen), 20)  # stopped by its budget
    rest: list = []
    resumed = explore(r, HEADS, part.cells, fake(rule, seen=rest), 1000)
    assert not set(rest) & set(first_seen)
    assert len(first_seen) + len(rest) == len(resumed.cells)
    assert set(resumed.cells) == set(whole.cells)
    assert next_cells(r, resumed.cells, HEADS) == []


def test_the_coarse_grid_is_spaced_in_each_axis_scale():
    grid = coarse_grid(ranges(tokens="16:4096:5", decode_share="0:1:3"), HEADS)
    assert sorted({c[NAMES.index("tokens")] for c in grid}) == [16, 64, 256, 1024, 4096]
    assert sorted({c[NAMES.index("decode_share")] for c in grid}) == [0.0, 0.5, 1.0]


def test_a_cell_is_the_batch_its_coordinates_say():
    c = dict(zip(NAMES, (0.25, 2048, 100, 512, 4, 128, 400)))
    batch = cell_batch(tuple(c.values()))
    assert batch.num_decode_seqs == 100 and batch.num_tokens == 400
    assert list(batch.query_lens[100:]) == [100, 100, 100]  # 300 prefill tokens in chunks of <= 100
    assert set(batch.kv_lens[:100]) == {2048} and list(batch.kv_lens[100:]) == [612, 612, 612]


@pytest.mark.parametrize("axis, text", [("tokens", "0:10"), ("tokens", "10:5"), ("decode_share", "0:1.5"),
                                        ("tokens", "1:8:1"), ("tokens", "8:8:3"), ("tokens", "a:b"),
                                        ("tokens", "1:2:3:4"), ("decode_share", "nan"), ("tokens", "1:2:999")])
def test_bad_ranges_are_refused_naming_the_flag(axis, text):
    with pytest.raises(UsageError, match=BY_NAME[axis].flag):
        parse_range(BY_NAME[axis], text)


def test_tolerance_is_ten_percent():
    assert TOLERANCE == 0.10
    assert BY_NAME["tokens"].located(1000, 1100) and not BY_NAME["tokens"].located(1000, 1200)


def test_cells_that_are_the_same_step_make_no_crossover():
    r = ranges(decode_share="1", prefill_context="0:8192:5")  # decode only: the prefill axes are not read
    coin = random.Random(1)
    measure = lambda coords: {c: CellOutcome(coin.choice(["A", "B"])) for c in coords}  # noqa: E731
    result = explore(r, HEADS, {}, measure, 100)
    assert len(result.cells) == 5 and len({o.winner for o in result.cells.values()}) == 2
    assert edges(r, result.cells, HEADS) == []
