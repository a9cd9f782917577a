"""e2e CUDA graph modes (`--cudagraph none|decode|full`, `--graph-policy safe|naive`; piecewise is
test_e2e_piecewise.py's): on the CPU, the pure parts (which bucket a step replays in, what a
full-graph step writes into the static buffers), a full-graph engine emulated without graphs on
the fake FA2 ops of test_graphsafe (launches that read metadata tensors when they run, and size
their grid by the plan's host ints), the flags, and the rows; on a GPU, real full graphs against
eager tokens under both policies."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch
from gpu_e2e import backend_params, cli_graph_run
from test_graphsafe import grid_backend
from typer.testing import CliRunner

from attnbench.cli import flags, scenario
from attnbench.cli.main import app
from attnbench.e2e.attention import PagedAttention
from attnbench.e2e.engine import Engine
from attnbench.e2e.graphs import FullGraphs, full_bucket, pad_step, token_buckets
from attnbench.e2e.model import ModelArgs, random_model
from attnbench.e2e.agreement import FAILING, compare_generations
from attnbench.e2e.modes import GraphMode, cudagraph_of
from attnbench.e2e.args import length_pairs
from attnbench.e2e.runner import E2EArgs, ModelEngines
from attnbench.e2e.scheduler import Sequence, make_prompts, schedule
from attnbench.kernels.graphsafe import static_buffers, write_batch
from attnbench.kernels.metadata import build_metadata
from attnbench.kernels.workload import Batch
from attnbench.results.read import load_run

TINY = ModelArgs.from_name("tiny")
SCENARIOS = Path(__file__).resolve().parent.parent / "scenarios"
SEQS, TOKENS = [1, 2, 4], token_buckets(16)


def test_token_buckets_are_powers_of_two_then_the_largest_step():
    assert token_buckets(16) == [1, 2, 4, 8, 16] and token_buckets(20) == [1, 2, 4, 8, 16, 20]
    assert token_buckets(1) == [1]


@pytest.mark.parametrize("batch, unified, split", [
    (Batch((1, 1, 1), (9, 20, 5), (True,) * 3), (0, 4, 4), (4, 0, 0)),  # decode
    (Batch((7, 3), (7, 3), (False, False)), (0, 2, 16), (0, 2, 16)),  # prefill
    (Batch((1, 1, 5), (9, 20, 5), (True, True, False)), (0, 4, 8), (2, 1, 8)),  # mixed: split's parts apart
])
def test_each_step_kind_picks_its_bucket(batch, unified, split):
    for strategy, want in (("unified", unified), ("split", split)):
        b = full_bucket(strategy, batch, SEQS, TOKENS, max_blocks_per_seq=4, block_size=16)
        assert (b.max_decode_seqs, b.max_prefill_seqs, b.max_tokens) == want, strategy
        assert b.max_seqlen_k == 64  # the safe upper bound
        # unified decode-only steps: max_seqlen_q 1 (FA2's decode path); every other bucket: its tokens
        assert b.max_query_len == (1 if strategy == "unified" and all(batch.is_decode) else b.max_tokens)


def test_unified_decode_steps_and_mixed_steps_of_as_many_tokens_replay_different_graphs():
    decode = full_bucket("unified", Batch((1,) * 4, (9, 20, 5, 7), (True,) * 4), SEQS, TOKENS, 4, 16)
    mixed = full_bucket("unified", Batch((1, 1, 1, 1), (9, 20, 5, 1), (True, True, True, False)), SEQS, TOKENS, 4, 16)
    assert (decode.max_tokens, decode.max_seqs) == (mixed.max_tokens, mixed.max_seqs) == (4, 4)
    assert (decode.max_query_len, mixed.max_query_len) == (1, 4) and decode != mixed


def _mixed_step(engine: Engine):
    seqs = [Sequence(i, p, len(p), 4) for i, p in enumerate(make_prompts(2, 10, TINY.vocab_size, seed=4))]
    seqs[0].num_cached = 10  # one decode row beside a prompt chunk: a mixed step
    seqs[0].tokens.append(5)
    engine.cache.reset()
    engine.cache.allocate(seqs[0], 10)
    return engine.prepare(schedule(seqs, 12))


@pytest.mark.parametrize("strategy", ["unified", "split"])
def test_a_full_graph_step_writes_safe_padded_metadata(strategy):
    model = random_model(TINY, torch.bfloat16, "cpu", seed=4)
    engine = ModelEngines(model, max_num_seqs=4, max_model_len=64, chunk_size=12).engine("reference", strategy)
    step = _mixed_step(engine)
    md = build_metadata(strategy, step.batch, step.block_table)
    bucket = full_bucket(strategy, step.batch, [1, 2, 4], token_buckets(12), 4, 16)
    scratch_slot = engine.cache.scratch_slot
    buffers = static_buffers(strategy, bucket, scratch_slot // 16, "cpu")
    written = write_batch(buffers, md, "safe")
    padded = pad_step(step, buffers, md, scratch_slot)
    assert len(padded.input_ids) == buffers.num_rows and len(padded.logits_indices) == bucket.max_seqs
    real = [i for i, s in enumerate(padded.slot_mapping) if s != scratch_slot]
    assert sorted(padded.slot_mapping[i] for i in real) == sorted(step.slot_mapping)
    assert [padded.input_ids[i] for i in real] == step.input_ids  # decode rows first, in the step's order
    varlen = written if strategy == "unified" else written.prefill
    cu = varlen.cu_seqlens_q
    assert (cu[1:] >= cu[:-1]).all() and varlen.max_seqlen_q == bucket.max_tokens and varlen.max_seqlen_k == 64
    if strategy == "split":  # decode rows at the front, the prefill part after the decode bucket's rows
        assert written.decode.cache_seqlens.tolist() == [11] and real[0] == 0 and real[1] == bucket.max_decode_seqs


def _emulated(model, cache_engines: ModelEngines, strategy: str, policy: str | None) -> Engine:
    backend, _ = grid_backend()
    attn = PagedAttention(backend, strategy, cache_engines.point, cache_engines.cache.k, cache_engines.cache.v)
    engine = Engine(model, cache_engines.cache, attn, cache_engines.max_num_seqs, cache_engines.max_model_len,
                    cache_engines.chunk_size)
    if policy:
        engine.full = FullGraphs(engine, policy, emulate=True)
    return engine


@pytest.mark.parametrize("strategy", ["unified", "split"])
def test_emulated_full_graphs_agree_with_eager_under_safe_and_naive_breaks_unified(strategy):
    """Chunked prefill (budget 16) over 3 prompts of 24: prefill, mixed and decode steps, some
    buckets reused by batches with a longer query than the one they were captured on."""
    model = random_model(TINY, torch.bfloat16, "cpu", seed=5)
    engines = ModelEngines(model, max_num_seqs=4, max_model_len=64, chunk_size=16)
    prompts = make_prompts(3, 24, TINY.vocab_size, seed=5)
    eager = _emulated(model, engines, strategy, None).generate(prompts, 8, record_logits=True)
    safe_engine = _emulated(model, engines, strategy, "safe")
    safe = safe_engine.generate(prompts, 8, record_logits=True)
    assert {s.kind for s in safe.steps} == {"prefill", "mixed", "decode"} and all(s.graph for s in safe.steps)
    assert compare_generations(eager.tokens, eager.logits, safe.tokens, safe.logits).verdict == "match"
    assert safe_engine.graph_stats()[0] == len(safe_engine.full.graphs) > 2
    naive = _emulated(model, engines, strategy, "naive").generate(prompts, 8, record_logits=True)
    verdict = compare_generations(eager.tokens, eager.logits, naive.tokens, naive.logits).verdict
    if strategy == "unified":  # a bucket captured with max_seqlen_q 8 replays a 15-token chunk: rows never computed
        # hold whatever that memory held (torch.empty), so the verdict is MISMATCH, non-finite or, when
        # the stale values happen to be close, near-tie (seen on a fresh CI clone); never a clean match
        assert verdict in (*FAILING, "near-tie")
    # split survives this schedule: its prefill buckets happen to be captured on their longest chunk


def test_the_naive_scenario_replays_a_bucket_on_a_query_past_the_tiles_it_was_captured_with(monkeypatch):
    """scenarios/graph-bug-naive.toml, the run that shows the seed's bug on a GPU: a bucket first
    captured on a step whose longest chunk fits one query tile (FA2's paged kernel: 64 rows) is
    replayed, at the next point on the same engine, on a chunk longer than FA3's largest tile (192
    rows), so a launch grid frozen at capture leaves rows of it unwritten."""
    args = flags.e2e_args(scenario.load_scenario(SCENARIOS / "graph-bug-naive.toml").values)
    assert (args.cudagraph, args.graph_policy) == ("full", "naive")
    pairs = length_pairs(args)
    model = random_model(TINY, torch.bfloat16, "cpu", seed=3)
    engines = ModelEngines(model, max(args.batch_size), max(i + o for i, o in pairs), chunk_size=args.chunk_size)
    engine = _emulated(model, engines, "unified", "naive")
    seen, load = [], engine.full.load  # (bucket, the step's longest query, captured before)

    def spy(step):
        bucket = engine.full.bucket(step)
        seen.append((bucket, max(step.batch.query_lens), bucket in engine.full.graphs))
        return load(step)
    monkeypatch.setattr(engine.full, "load", spy)
    for input_len, output_len in pairs:
        engine.generate(make_prompts(args.batch_size[0], input_len, TINY.vocab_size, args.seed), output_len)
    captured = {bucket: q for bucket, q, before in seen if not before}
    assert any(captured[bucket] <= 64 and q > 192 for bucket, q, before in seen if before), seen


def invoke(*args: str):
    return CliRunner().invoke(app, ["e2e", "--model", "tiny", "--warmup", "0", "--iters", "1", "--input-len", "8",
                                    "--output-len", "3", "--batch-size", "2", "--device", "cpu", *args])


@pytest.mark.parametrize("args, needle", [
    (["--graph-policy", "naive", "--cudagraph", "decode"], "--graph-policy naive: only with --cudagraph full"),
    (["--graph-policy", "naive", "--eager"], "--graph-policy naive: only with --cudagraph full"),
    (["--eager", "--cudagraph", "decode"], "--eager is --cudagraph none"),
    (["--cudagraph", "fast"], "--cudagraph: unknown mode 'fast'"),
    (["--eager", "--cudagraph", "piecewise"], "--eager is --cudagraph none"),
    (["--cudagraph", "piecewise", "--graph-policy", "naive"], "--graph-policy naive: only with --cudagraph full"),
    (["--eager", "--cudagraph", "full"], "--eager is --cudagraph none"),
    (["--cudagraph", "full", "--graph-policy", "lazy"], "--graph-policy: unknown policy 'lazy'"),
])
def test_bad_graph_flags_are_one_line(args, needle):
    result = invoke(*args)
    assert result.exit_code != 0 and "error:" in result.output and needle in " ".join(result.output.split())
    assert "Traceback" not in result.output


@pytest.fixture(scope="module")
def full_on_cpu(tmp_path_factory):
    out = tmp_path_factory.mktemp("e2e") / "run"
    result = invoke("--cudagraph", "full", "--graph-policy", "naive", "--out", str(out))
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback")
def test_full_on_the_cpu_falls_back_to_none_with_a_note_as_decode_does(full_on_cpu):
    df = pd.read_csv(full_on_cpu / "results.csv")
    assert (df["cudagraph"] == "none").all() and (df["mode"] == "eager").all() and (df["graphs"] == 0).all()
    assert df["graph_note"].str.contains("CUDA graphs need a GPU").all() and (df["verdict"] == "pass").all()


def test_rows_carry_cudagraph_and_older_results_read_with_its_default(full_on_cpu, tmp_path):
    assert load_run(full_on_cpu, "RUN").rows["cudagraph"].notna().all()
    old = pd.read_csv(full_on_cpu / "results.csv").drop(columns=["cudagraph"])
    old = pd.concat([old, old.assign(mode="graph", strategy=old["strategy"] + "")]).reset_index(drop=True)
    old.loc[len(old) // 2:, "batch_size"] = 4  # the graph rows: another point (one row per key)
    old.to_csv(tmp_path / "results.csv", index=False)
    rows = load_run(tmp_path / "results.csv", "OLD").rows
    assert rows.groupby("mode")["cudagraph"].agg(set).to_dict() == {"eager": {"none"}, "graph": {"decode"}}


# --- GPU --------------------------------------------------------------------------------------

GPU_BACKENDS = backend_params("vllm-fa2", "vllm-fa3", "vllm-triton")


@pytest.mark.parametrize("backend", GPU_BACKENDS)
class TestFullGraphsOnTheGPU:
    """Full graphs on a GPU against eager tokens."""

    pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

    @pytest.mark.parametrize("strategy", ["unified", "split"])
    def test_full_safe_matches_none_and_naive_is_caught(self, backend, strategy):
        model = random_model(TINY, torch.bfloat16, "cuda", seed=7)
        engines = ModelEngines(model, max_num_seqs=4, max_model_len=64, chunk_size=16)
        prompts = make_prompts(3, 24, TINY.vocab_size, seed=7)
        eager = engines.engine(backend, strategy, GraphMode.NONE).generate(prompts, 12, record_logits=True)
        full = engines.engine(backend, strategy, GraphMode.FULL)
        safe = full.generate(prompts, 12, record_logits=True)
        assert all(s.graph for s in safe.steps) and full.graph_stats()[0] > 2 and full.graph_stats()[1] > 0
        assert full.generate(prompts, 12).tokens == safe.tokens, "a replay is not repeatable"
        result = compare_generations(eager.tokens, eager.logits, safe.tokens, safe.logits)
        assert result.verdict in ("match", "near-tie"), result
        naive = engines.engine(backend, strategy, GraphMode.FULL, "naive").generate(prompts, 12, record_logits=True)
        verdict = compare_generations(eager.tokens, eager.logits, naive.tokens, naive.logits).verdict
        print(backend, strategy, "naive:", verdict)
        if verdict not in FAILING:
            pytest.skip(f"{backend} {strategy} survived the naive policy on this schedule ({verdict}): nothing caught")

    def test_cli_full_rows_record_graphs_and_agree(self, backend, tmp_path):
        df, agreement = cli_graph_run(backend, "full", tmp_path)
        assert (df["cudagraph"] == "full").all() and (df["graphs"] > 0).all() and (df["graph_mem_mb"] > 0).all()
        assert (df["verdict"] == "pass").all(), df[["strategy", "batch_size", "verdict", "reason"]]
        assert "unified graph" in set(agreement["run"]) and set(agreement["verdict"]) <= {"match", "near-tie"}

    @pytest.mark.parametrize("policy", ["naive", "safe"])
    def test_the_naive_scenario_shows_the_seed_bug_and_safe_fixes_it(self, backend, policy, tmp_path):
        """scenarios/graph-bug-naive.toml: naive's unified rows of the second point disagree with eager
        (MISMATCH or non-finite), so those rows fail, on FA2; under safe every row passes and agrees."""
        out = tmp_path / policy
        result = CliRunner().invoke(app, ["run", str(SCENARIOS / "graph-bug-naive.toml"), "--backend", backend,
                                          "--graph-policy", policy, "--out", str(out)])
        assert result.exit_code == 0, result.output  # measured rows, some failed: not a failed run
        df = pd.read_csv(out / "results.csv")
        print(policy, df[["input_len", "strategy", "agreement", "verdict"]].to_string())
        if policy == "safe":
            assert (df["verdict"] == "pass").all() and set(df["agreement"]) <= {"match", "near-tie"}, df
            return
        second = df[(df["input_len"] == 240) & (df["strategy"] == "unified")]
        if backend != "vllm-fa2" and not set(second["agreement"]) & set(FAILING):  # FA2 is the one seen to break
            pytest.skip(f"{backend} unified survived the naive policy on this schedule too (vllm-fa3 did on the H200)")
        assert set(second["agreement"]) <= set(FAILING) and len(second) == 1 and (second["verdict"] == "fail").all()


def test_the_default_mode_is_full_under_tensor_parallelism_too():
    assert cudagraph_of(E2EArgs()) == "full" and cudagraph_of(E2EArgs(tp=2)) == "full"
    assert cudagraph_of(E2EArgs(tp=2, cudagraph="decode")) == "decode" and cudagraph_of(E2EArgs(eager=True)) == "none"
    assert cudagraph_of(E2EArgs(cudagraph="piecewise")) is GraphMode.PIECEWISE  # the CLI's text becomes the type
