"""`--cudagraph piecewise` (attnbench/e2e/piecewise.py), and `full` on a backend whose graphs replay
on decode batches only. On the CPU, graphs are emulated (a "replay" runs the segment again on the
bucket's static buffers): piecewise against eager tokens on chunked prefill with mixed steps, for
the reference backend and the fake FA2 ops of test_graphsafe, both strategies; how many segment
graphs a bucket gets; padding rows poisoned with NaN never reaching attention or the KV cache;
the modes' notes and the rows' columns. On a GPU: real piecewise graphs, and full with
decode graphs + piecewise, against eager tokens."""

from __future__ import annotations

import dataclasses
import functools

import pandas as pd
import pytest
import torch
from gpu_e2e import backend_params, cli_graph_run
from test_graphsafe import grid_backend
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.e2e import runner
from attnbench.e2e.attention import PagedAttention
from attnbench.e2e.engine import Engine
from attnbench.e2e.graphs import FullGraphs, round_up, token_buckets
from attnbench.e2e.model import ModelArgs, random_model
from attnbench.e2e.agreement import compare_generations
from attnbench.e2e.modes import GraphMode, choose_graphs
from attnbench.e2e.piecewise import PiecewiseGraphs
from attnbench.e2e.runner import E2EArgs, ModelEngines, run_point
from attnbench.e2e.scheduler import make_prompts
from attnbench.errors import AttnbenchError
from attnbench.kernels.backends.registry import get_backend

TINY = ModelArgs.from_name("tiny")


def _engine(engines: ModelEngines, backend: str, strategy: str, cudagraph: GraphMode, emulate: bool = True) -> Engine:
    kernel = grid_backend()[0] if backend == "fake-fa2" else get_backend(backend)
    attn = PagedAttention(kernel, strategy, engines.point, engines.cache.k, engines.cache.v)
    return Engine(engines.model, engines.cache, attn, engines.max_num_seqs, engines.max_model_len,
                  engines.chunk_size, cudagraph, emulate=emulate)


def _chunked(args: ModelArgs = TINY, seed: int = 5):
    """3 prompts of 24 under a 16-token budget: prefill, mixed and decode steps, most of them padded."""
    model = random_model(args, torch.bfloat16, "cpu", seed=seed)
    return ModelEngines(model, max_num_seqs=4, max_model_len=64, chunk_size=16), make_prompts(3, 24, args.vocab_size,
                                                                                              seed=seed)


@pytest.mark.parametrize("strategy", ["unified", "split"])
@pytest.mark.parametrize("backend", ["reference", "fake-fa2"])
def test_emulated_piecewise_gives_the_eager_tokens(backend, strategy):
    engines, prompts = _chunked()
    eager = _engine(engines, backend, strategy, GraphMode.NONE).generate(prompts, 8, record_logits=True)
    engine = _engine(engines, backend, strategy, GraphMode.PIECEWISE)
    piecewise = engine.generate(prompts, 8, record_logits=True)
    assert {s.kind for s in piecewise.steps} == {"prefill", "mixed", "decode"} and all(s.graph for s in piecewise.steps)
    assert any(s.tokens not in engine.piecewise.tok_buckets for s in piecewise.steps), "no step was padded"
    assert piecewise.tokens == eager.tokens
    assert compare_generations(eager.tokens, eager.logits, piecewise.tokens, piecewise.logits).verdict == "match"
    assert engine.generate(prompts, 8).tokens == piecewise.tokens, "a replay of captured buckets is not repeatable"


def test_each_token_bucket_gets_one_graph_per_segment_between_attention_calls():
    three = dataclasses.replace(TINY, name="tiny-3", n_layer=3)  # 4 segments: not a coincidence of 2 layers
    engines, prompts = _chunked(three)
    engine = _engine(engines, "reference", "unified", GraphMode.PIECEWISE)
    steps = engine.generate(prompts, 8).steps
    buckets = {round_up(s.tokens, token_buckets(16)) for s in steps}
    assert set(engine.piecewise.graphs) == buckets and len(buckets) > 2
    assert all(len(replays) == 4 for _, replays in engine.piecewise.graphs.values())
    assert engine.graph_stats() == (4 * len(buckets), 0)  # emulated: no device memory
    engine.generate(prompts, 8)
    assert engine.graph_stats()[0] == 4 * len(buckets), "a bucket was captured twice"


@pytest.mark.parametrize("strategy", ["unified", "split"])
def test_padding_rows_never_reach_attention_or_the_kv_cache(strategy, monkeypatch):
    """The static attention output starts as NaN: its padding rows stay NaN (attention writes only
    the step's real rows), so every padding row computes NaN q/k/v. Had any reached attention, NaN
    K/V would be in the cache; the cache must hold exactly what eager writes, and nothing else."""
    engines, prompts = _chunked()
    cache = engines.cache
    cache.k.zero_(), cache.v.zero_()
    eager = _engine(engines, "fake-fa2", strategy, GraphMode.NONE).generate(prompts, 8)
    eager_k, eager_v = cache.k.clone(), cache.v.clone()
    buffers = PiecewiseGraphs._buffers

    def poisoned(self, tokens):
        static = buffers(self, tokens)
        static.attn_out.fill_(float("nan"))
        return static
    monkeypatch.setattr(PiecewiseGraphs, "_buffers", poisoned)
    cache.k.zero_(), cache.v.zero_()
    engine = _engine(engines, "fake-fa2", strategy, GraphMode.PIECEWISE)
    piecewise = engine.generate(prompts, 8, record_logits=True)
    padded = [s for s in piecewise.steps if s.tokens not in engine.piecewise.tok_buckets]
    assert padded and piecewise.tokens == eager.tokens and torch.isfinite(piecewise.logits).all()
    assert any(torch.isnan(s.attn_out).any() for s, _ in engine.piecewise.graphs.values())  # the poison was there
    for got, want in ((cache.k, eager_k), (cache.v, eager_v)):
        assert torch.isfinite(got).all()
        written = want.flatten(3).ne(0).any(-1)  # [layer, block, offset]: the slots eager wrote
        assert torch.equal(got.flatten(3).ne(0).any(-1), written) and not written[:, -1].any()  # scratch untouched
        torch.testing.assert_close(got, want, atol=2e-2, rtol=2e-2)


def test_full_on_a_decode_only_backend_runs_decode_graphs_and_piecewise():
    engines, _ = _chunked()
    engine = _engine(engines, "fake-fa2", "unified", GraphMode.FULL)
    assert isinstance(engine.full, FullGraphs) and engine.piecewise is None and engine.decode is None
    engine.attn.backend.graph_replay = "decode-only"  # FlashInfer's declaration, on this fake's instance
    choice = choose_graphs(engine.attn.backend, GraphMode.FULL, "cuda", 4)
    assert (choice.cudagraph, choice.decode, choice.full, choice.piecewise) == (GraphMode.FULL, True, False, True)
    piecewise = Engine(engines.model, engines.cache, engine.attn, 4, 64, 16, GraphMode.PIECEWISE, emulate=True)
    assert piecewise.full is None and isinstance(piecewise.piecewise, PiecewiseGraphs)  # never captures attention
    with pytest.raises(AttnbenchError, match="CUDA graphs need a CUDA device"):  # its decode graphs: no emulation
        Engine(engines.model, engines.cache, engine.attn, 4, 64, 16, GraphMode.FULL, emulate=True)


def test_an_engine_refuses_a_mode_that_does_not_run_here():
    """No silent fallback inside the engine: the job records the fallback, the engine is made for it."""
    engines, _ = _chunked()
    with pytest.raises(AttnbenchError, match="CUDA graph mode full does not run here: eager: CUDA graphs need a GPU"):
        _engine(engines, "fake-fa2", "unified", GraphMode.FULL, emulate=False)
    with pytest.raises(AttnbenchError, match="mode decode does not run here: .*reference backend cannot be captured"):
        _engine(engines, "reference", "unified", GraphMode.DECODE)


def _choice(backend: str, cudagraph: GraphMode, device_type: str = "cuda", n_layer: int = 0):
    """The registry's backend's choice (only the device's type is read: no GPU is touched)."""
    return choose_graphs(get_backend(backend), cudagraph, device_type, 4, n_layer=n_layer)


def test_each_mode_says_what_runs():
    choice = _choice("reference", GraphMode.PIECEWISE, n_layer=2)
    assert choice.cudagraph == "piecewise" and "3 per token bucket" in choice.note
    assert "attention runs eagerly" in choice.note
    assert _choice("reference", GraphMode.FULL).cudagraph == "none"  # full captures attention: graph_safe needed
    assert _choice("reference", GraphMode.PIECEWISE, "cpu").cudagraph == "none"
    choice = _choice("flashinfer", GraphMode.FULL, n_layer=2)
    assert choice.cudagraph == "full" and "decode CUDA graphs (buckets 1,2,4)" in choice.note
    assert "run piecewise" in choice.note and "pure-decode batches only" in choice.note
    assert "every step replays a CUDA graph" in _choice("vllm-fa2", GraphMode.FULL).note
    # flex: no captured graph replays another batch (graph_replay "none"): eager, piecewise under full
    for cudagraph, want in (("decode", "none"), ("full", "piecewise"), ("piecewise", "piecewise")):
        choice = _choice("flex", GraphMode(cudagraph), n_layer=2)
        assert choice.cudagraph == want, (cudagraph, choice)
        assert ("graph_replay='none'" in choice.note) == (cudagraph != "piecewise"), (cudagraph, choice)


def test_piecewise_rows_record_mode_graphs_and_the_eager_check(monkeypatch):
    monkeypatch.setattr(runner, "Engine", functools.partial(Engine, emulate=True))
    model = random_model(TINY, torch.bfloat16, "cpu", seed=6)
    engines = ModelEngines(model, max_num_seqs=2, max_model_len=11, chunk_size=5)
    args = E2EArgs(model="tiny", input_len=[8], output_len=[3], batch_size=[2], chunk_size=5,
                   backend=["reference"], warmup=0, iters=1, cudagraph=GraphMode.PIECEWISE, device="cpu")
    choices = {"reference": choose_graphs(get_backend("reference"), GraphMode.PIECEWISE, "cuda", 2, TINY.n_layer)}
    rows, agreements = run_point(engines, args, choices, {"input_len": 8, "output_len": 3, "batch_size": 2})
    df = pd.DataFrame(rows)
    assert (df["cudagraph"] == "piecewise").all() and (df["mode"] == "graph").all() and (df["graph_policy"] == "").all()
    assert (df["verdict"] == "pass").all(), df[["strategy", "verdict", "reason"]]
    assert df["graph_note"].str.contains("piecewise CUDA graphs").all() and (df["graph_mem_mb"] == 0).all()
    for strategy, count in zip(df["strategy"], df["graphs"]):
        engine = engines.engines[("reference", strategy, "piecewise", "")]
        assert count == 3 * len(engine.piecewise.graphs) > 0
    runs = {(a["reference"], a["run"]): a["verdict"] for a in agreements}
    assert runs[("unified eager", "unified graph")] == runs[("split eager", "split graph")] == "match"


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU fallback")
def test_piecewise_on_the_cpu_falls_back_to_none_with_a_note(tmp_path):
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["e2e", "--model", "tiny", "--warmup", "0", "--iters", "1", "--input-len", "8",
                                      "--output-len", "3", "--batch-size", "2", "--device", "cpu",
                                      "--cudagraph", "piecewise", "--out", str(out)])
    assert result.exit_code == 0, result.output
    df = pd.read_csv(out / "results.csv")
    assert (df["cudagraph"] == "none").all() and df["graph_note"].str.contains("CUDA graphs need a GPU").all()


# --- GPU --------------------------------------------------------------------------------------

GPU_BACKENDS = backend_params("vllm-fa2", "vllm-fa3", "flashinfer", "vllm-triton")


@pytest.mark.parametrize("backend", GPU_BACKENDS)
class TestPiecewiseGraphsOnTheGPU:
    """Piecewise graphs on a GPU against eager tokens."""

    pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

    @staticmethod
    def _setup(seed: int = 7):
        model = random_model(TINY, torch.bfloat16, "cuda", seed=seed)
        return ModelEngines(model, max_num_seqs=4, max_model_len=64, chunk_size=16), make_prompts(3, 24, TINY.vocab_size,
                                                                                                  seed=seed)

    @pytest.mark.parametrize("strategy", ["unified", "split"])
    def test_piecewise_matches_none(self, backend, strategy):
        engines, prompts = self._setup()
        eager = engines.engine(backend, strategy, GraphMode.NONE).generate(prompts, 12, record_logits=True)
        engine = engines.engine(backend, strategy, GraphMode.PIECEWISE)
        run = engine.generate(prompts, 12, record_logits=True)
        assert {s.kind for s in run.steps} == {"prefill", "mixed", "decode"} and all(s.graph for s in run.steps)
        count, reserved = engine.graph_stats()
        assert count == (TINY.n_layer + 1) * len(engine.piecewise.graphs) > 3 and reserved > 0
        assert engine.generate(prompts, 12).tokens == run.tokens, "a replay is not repeatable"
        result = compare_generations(eager.tokens, eager.logits, run.tokens, run.logits)
        assert result.verdict in ("match", "near-tie"), result

    @pytest.mark.parametrize("strategy", ["unified", "split"])
    def test_full_on_a_decode_only_backend_matches_none(self, backend, strategy, monkeypatch):
        kernel = get_backend(backend)
        monkeypatch.setattr(kernel, "graph_replay", "decode-only")  # FlashInfer's own value; FA2/FA3 made to say it
        engines, prompts = self._setup(8)
        eager = engines.engine(backend, strategy, GraphMode.NONE).generate(prompts, 12, record_logits=True)
        engine = engines.engine(backend, strategy, GraphMode.FULL)
        assert engine.full is None and engine.piecewise is not None and engine.decode is not None
        run = engine.generate(prompts, 12, record_logits=True)
        assert all(s.graph for s in run.steps) and engine.piecewise.graphs
        assert engine.graph_stats()[0] == engine.decode.num_graphs + engine.piecewise.num_graphs
        result = compare_generations(eager.tokens, eager.logits, run.tokens, run.logits)
        assert result.verdict in ("match", "near-tie"), result

    def test_cli_piecewise_rows_record_graphs_and_agree(self, backend, tmp_path):
        df, agreement = cli_graph_run(backend, "piecewise", tmp_path)
        assert (df["cudagraph"] == "piecewise").all() and (df["graphs"] > 0).all() and (df["graph_mem_mb"] > 0).all()
        assert (df["graphs"] % (TINY.n_layer + 1) == 0).all()
        assert (df["verdict"] == "pass").all(), df[["strategy", "batch_size", "verdict", "reason"]]
        assert "unified graph" in set(agreement["run"]) and set(agreement["verdict"]) <= {"match", "near-tie"}
