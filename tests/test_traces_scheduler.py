"""The scheduler simulation (traces/scheduler.py) against small cases worked out by hand from the
rules its docstring states, and properties over random request traces: the budget and the cap hold,
every request finishes, and the tokens computed add up to the prompts (less cache hits) plus the
outputs (less the one each prompt's last step yields)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from attnbench.traces.requests import TimedRequest
from attnbench.traces.scheduler import SchedulerConfig, simulate
from attnbench.traces.steps import Request as R


def rows(requests, **config):
    sim = simulate(requests, SchedulerConfig(**{"step_ms": 1.0, "chunk_size": 0, **config}))
    return [list(step.requests) for step in sim.steps], sim


def test_two_prompts_share_the_budget_and_the_second_is_chunked():
    # budget 8: A's 5-token prompt, then 3 of B's 6; next step A decodes and B finishes its prompt
    steps, sim = rows([TimedRequest(0, 5, 3), TimedRequest(0, 6, 2)], max_num_batched_tokens=8, max_num_seqs=4)
    assert steps == [[R(5, 5), R(3, 3, chunked=True)],
                     [R(1, 6), R(3, 6, chunked=True)],
                     [R(1, 7), R(1, 7)]]
    assert (sim.finished, sim.unfinished) == (2, 0)


def test_the_sequence_cap_keeps_a_request_waiting():
    steps, _ = rows([TimedRequest(0, 2, 2), TimedRequest(0, 3, 1)], max_num_seqs=1, step_ms=1000.0)
    assert steps == [[R(2, 2)], [R(1, 3)], [R(3, 3)]]


def test_arrivals_are_honoured_and_an_idle_engine_jumps_to_the_next():
    steps, sim = rows([TimedRequest(10.0, 2, 1), TimedRequest(0, 1, 1)], step_ms=1000.0)
    assert steps == [[R(1, 1)], [R(2, 2)]]
    assert sim.seconds == 11.0


def test_a_request_arriving_mid_run_joins_at_the_next_step():
    steps, _ = rows([TimedRequest(0, 1, 4), TimedRequest(0.0015, 2, 1)], step_ms=1.0)
    assert steps == [[R(1, 1)], [R(1, 2)], [R(1, 3), R(2, 2)], [R(1, 4)]]


def test_chunk_size_caps_a_prompt_per_step():
    steps, _ = rows([TimedRequest(0, 10, 1)], chunk_size=4)
    assert steps == [[R(4, 4, chunked=True)], [R(4, 8, chunked=True)], [R(2, 10, chunked=True)]]


def test_a_prefix_hit_is_whole_blocks_short_of_the_last_token():
    steps, _ = rows([TimedRequest(0, 100, 2, prefix_len=40)], block_size=16)
    assert steps == [[R(68, 100, prefix_hit=32)], [R(1, 101)]]
    steps, _ = rows([TimedRequest(0, 32, 1, prefix_len=32)], block_size=16)
    assert steps == [[R(16, 32, prefix_hit=16)]]


def test_a_prefix_hit_on_a_chunked_prompt_stays_on_every_chunk():
    steps, _ = rows([TimedRequest(0, 100, 1, prefix_len=64)], block_size=16, chunk_size=20)
    assert steps == [[R(20, 84, chunked=True, prefix_hit=64)], [R(16, 100, chunked=True, prefix_hit=64)]]


def test_draft_tokens_are_verified_and_all_accepted():
    steps, _ = rows([TimedRequest(0, 4, 6)], num_draft_tokens=3)
    assert steps == [[R(4, 4)], [R(4, 8, num_draft_tokens=3)], [R(1, 9)]]


def test_decodes_come_first_and_a_spent_budget_leaves_the_rest_waiting():
    steps, _ = rows([TimedRequest(0, 1, 2)] * 3, max_num_batched_tokens=2, max_num_seqs=3)
    assert steps == [[R(1, 1), R(1, 1)], [R(1, 2), R(1, 2)], [R(1, 1)], [R(1, 2)]]


def test_max_steps_stops_and_counts_what_is_left():
    sim = simulate([TimedRequest(0, 1, 100)] * 2, SchedulerConfig(max_steps=5))
    assert len(sim.steps) == 5 and (sim.finished, sim.unfinished) == (0, 2)


timed = st.builds(lambda t, i, o, p: TimedRequest(t, i, o, min(p, i)), st.floats(0, 2), st.integers(1, 300),
                  st.integers(1, 40), st.integers(0, 300))
configs = st.builds(SchedulerConfig, st.integers(8, 600), st.integers(1, 12), st.integers(0, 128), st.integers(0, 4),
                    st.floats(0.5, 50), st.sampled_from([1, 16, 32]))


@settings(max_examples=80, deadline=None)
@given(requests=st.lists(timed, min_size=1, max_size=25), config=configs)
def test_budget_cap_and_every_request_finishes(requests, config):
    sim = simulate(requests, config)
    assert (sim.finished, sim.unfinished) == (len(requests), 0)
    for step in sim.steps:
        assert step.num_tokens <= config.max_num_batched_tokens
        assert len(step.requests) <= config.max_num_seqs
        assert all(r.query_len <= (config.chunk_size or r.query_len) for r in step.requests if not r.decode_role)
    hits = [min(r.prefix_len, r.input_len - 1) // config.block_size * config.block_size for r in requests]
    expected = sum(r.input_len - h + r.output_len - 1 for r, h in zip(requests, hits))
    assert sum(step.num_tokens for step in sim.steps) == expected
    assert simulate(requests, config) == sim  # deterministic
