"""The e2e engine and command: paging, scheduling, greedy generation against a no-cache oracle, the
agreement check, the CLI end to end and its bad input; on a GPU, unified vs split vs eager under
CUDA graphs with vllm-fa2, and a planted graph bug that the agreement check must catch."""

from __future__ import annotations

import json

import pandas as pd
import pytest
import torch
from conftest import PNG_MAGIC
from gpu_e2e import backend_params
from model_fixtures import oracle_logits, write_checkpoint
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.e2e.runner import ModelEngines
from attnbench.e2e.agreement import compare_generations
from attnbench.e2e.engine import Engine
from attnbench.e2e.decode_graphs import DecodeGraphs
from attnbench.e2e.modes import GraphMode, graph_buckets
from attnbench.e2e.scheduler import KVCache, Sequence, make_prompts, schedule
from attnbench.e2e.model import ModelArgs, random_model

TINY = ModelArgs.from_name("tiny")
QUICK = ["--model", "tiny", "--warmup", "1", "--iters", "2", "--device", "cpu"]


def make_engine(model, strategy: str, backend: str = "reference", chunk_size=None,
                cudagraph: GraphMode = GraphMode.NONE) -> Engine:
    return ModelEngines(model, max_num_seqs=4, max_model_len=64, chunk_size=chunk_size).engine(backend, strategy,
                                                                                               cudagraph)


# --- host side ---------------------------------------------------------------------------------

def test_chunked_prefill_makes_mixed_batches_with_decode_rows_first():
    seqs = [Sequence(i, [1] * 20, 20, 4) for i in range(3)]
    first = schedule(seqs, token_budget=24)
    assert [(s.index, n) for s, n in first] == [(0, 20), (1, 4)]
    seqs[0].num_cached, seqs[0].tokens = 20, seqs[0].tokens + [7]  # its prompt is done, one token out
    seqs[1].num_cached = 4
    second = schedule(seqs, token_budget=24)
    assert [(s.index, n) for s, n in second] == [(0, 1), (1, 16), (2, 7)]


def test_whole_prefill_takes_every_prompt_in_one_step():
    seqs = [Sequence(i, [1] * 30, 30, 2) for i in range(4)]
    assert [n for _, n in schedule(seqs, token_budget=10**9)] == [30] * 4


def test_blocks_are_allocated_per_request_and_the_scratch_block_never():
    cache = KVCache(TINY, num_blocks=6, block_size=16, dtype=torch.bfloat16, device="cpu")
    a, b = Sequence(0, [1] * 40, 40, 1), Sequence(1, [1] * 16, 16, 1)
    cache.allocate(a, 40)
    cache.allocate(b, 17)
    assert len(a.block_table) == 3 and len(b.block_table) == 2
    assert cache.num_blocks not in a.block_table + b.block_table  # the scratch block
    assert len(set(a.block_table + b.block_table)) == 5
    cache.release(a)
    assert len(cache.free) == 4 and a.block_table == []


def test_graph_buckets():
    assert graph_buckets(32) == [1, 2, 4, 8, 16, 32]
    assert graph_buckets(3) == [1, 2, 3]
    assert graph_buckets(40) == [1, 2, 4, 8, 16, 32, 40]


@pytest.mark.parametrize("strategy", ["unified", "split"])
@pytest.mark.parametrize("chunk_size", [None, 12])
def test_generation_matches_a_no_cache_oracle(strategy, chunk_size):
    """Every recorded logit row equals a from-scratch forward over prompt + generated tokens."""
    model = random_model(TINY, torch.bfloat16, "cpu", seed=5)
    prompts = make_prompts(3, 21, TINY.vocab_size, seed=5)
    engine = make_engine(model, strategy, chunk_size=chunk_size)
    run = engine.generate(prompts, output_len=6, record_logits=True)
    if chunk_size:
        assert "mixed" in {s.kind for s in run.steps}
    for r, (prompt, out) in enumerate(zip(prompts, run.tokens)):
        assert len(out) == 6
        expected = oracle_logits(model, prompt + out)[len(prompt) - 1:-1]
        assert (run.logits[r].float() - expected).abs().max() < 0.05
        assert out == expected.argmax(-1).tolist()


# --- agreement --------------------------------------------------------------------------------

def _logits(requests=4, steps=10, vocab=50, seed=0):
    return torch.randn(requests, steps, vocab, generator=torch.Generator().manual_seed(seed))


def test_identical_runs_match():
    logits = _logits()
    tokens = logits.argmax(-1).tolist()
    result = compare_generations(tokens, logits, tokens, logits.clone())
    assert (result.verdict, result.tokens_equal, result.first_divergence, result.max_logit_diff) == ("match", 1.0, "", 0.0)


def test_a_planted_near_tie_flip_is_found_and_called_a_near_tie():
    ref = _logits()
    top2 = ref[2, 5].topk(2).indices
    ref[2, 5, top2[1]] = ref[2, 5, top2[0]] - 0.01  # request 2, step 5: a near-tie between its top two
    other = ref + 1e-3 * _logits(seed=1)
    ref_tokens = ref.argmax(-1).tolist()
    tokens = [list(t) for t in ref_tokens]
    # the other run flips that near-tie, then goes its own way
    other[2, 5, top2[1]] = ref[2, 5, top2[0]] + 0.01
    tokens[2][5:] = [int(top2[1])] + [(t + 1) % 50 for t in ref_tokens[2][6:]]
    other[2, 6:] = _logits(seed=2)[2, 6:]  # inputs differ after the flip: logits no longer comparable
    result = compare_generations(ref_tokens, ref, tokens, other)
    assert result.first_divergence == "request 2 step 5"
    assert result.diverged_requests == 1
    assert result.tokens_equal == pytest.approx(1 - 5 / 40)
    assert result.verdict == "near-tie"
    assert result.max_logit_diff < 0.05  # the steps after the flip are not counted
    assert 0 <= result.margin_at_divergence <= result.max_logit_diff * 2


def test_garbage_logits_are_a_mismatch_even_with_equal_tokens():
    ref = _logits()
    tokens = ref.argmax(-1).tolist()
    assert compare_generations(tokens, ref, tokens, _logits(seed=9)).verdict == "MISMATCH"


def test_non_finite_logits_fail():
    ref = _logits()
    other = ref.clone()
    other[1, 3, 7] = float("nan")
    tokens = ref.argmax(-1).tolist()
    assert compare_generations(tokens, ref, tokens, other).verdict == "non-finite"


# --- the command ------------------------------------------------------------------------------

def invoke(*args):
    return CliRunner().invoke(app, ["e2e", *args])


def test_tiny_end_to_end_through_the_cli(tmp_path):
    out = tmp_path / "run"
    result = invoke(*QUICK, "--input-len", "12", "--output-len", "4", "--batch-size", "1,3", "--chunk-size", "8",
                    "--out", str(out))
    assert result.exit_code == 0, result.output
    for name in ("results.csv", "results.parquet", "agreement.csv", "env.json", "summary.md"):
        assert (out / name).exists(), name
    for name in ("e2e_latency.png", "e2e_ratio.png"):
        assert (out / name).read_bytes()[:8] == PNG_MAGIC
    df = pd.read_csv(out / "results.csv")
    assert len(df) == 4 and set(df["strategy"]) == {"unified", "split"}
    assert (df["verdict"] == "pass").all() and (df["mode"] == "eager").all()
    assert df["graph_note"].str.contains("CUDA graphs need a GPU").all()
    assert (df["request_p50_s"] > 0).all()
    assert (df[df["batch_size"] == 3]["mixed_steps_per_run"] > 0).all()  # chunked prefill beside decodes
    agreement = pd.read_csv(out / "agreement.csv")
    assert set(agreement["verdict"]) == {"match"}  # the reference backend computes both strategies alike
    summary = (out / "summary.md").read_text()
    assert "| input len | output len | batch size | unified p50 s | split p50 s | split / unified |" in summary
    assert json.loads((out / "env.json").read_text())["e2e"]["model"] == "tiny"


def test_a_checkpoint_directory_runs_through_the_cli(tmp_path):
    path = write_checkpoint(random_model(TINY, torch.bfloat16, "cpu"), tmp_path / "my-llama")
    result = invoke(*QUICK[2:], "--model", str(path), "--input-len", "8", "--output-len", "2", "--batch-size", "2",
                    "--strategy", "unified", "--out", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    assert (pd.read_csv(tmp_path / "run" / "results.csv")["verdict"] == "pass").all()


@pytest.mark.parametrize("args, needle", [
    (["--model", "gpt-5"], "presets: llama-7b, llama-3-8b, llama-13b, qwen-14b, tiny"),
    (["--model", "./no/such/dir"], "no such checkpoint directory"),
    (["--input-len", "0"], "--input-len: must be an integer between 1 and"),
    (["--output-len", "-3"], "--output-len: must be an integer between 1 and"),
    (["--batch-size", "1,0"], "--batch-size: must be an integer between 1 and"),
    (["--chunk-size", "0"], "--chunk-size: must be an integer between 1 and"),
    (["--input-len", "1,2,3", "--output-len", "4,5"], "do not pair up"),
    (["--batch-size", "two"], "--batch-size: expected a comma-separated list"),
    (["--strategy", "fission"], "unknown strategy"),
    (["--strategy", "unified,fused"], "has no fused strategy"),
    (["--model", "llama-7b"], "without a GPU only runs up to 2 GiB"),
])
def test_bad_input_is_one_line_and_a_nonzero_exit(args, needle):
    result = invoke(*QUICK, *args)
    assert result.exit_code != 0
    assert "error:" in result.output and needle in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_a_malformed_checkpoint_is_refused_through_the_cli(tmp_path):
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{")
    (tmp_path / "bad" / "model.safetensors").write_bytes(b"")
    result = invoke(*QUICK, "--model", str(tmp_path / "bad"))
    assert result.exit_code != 0 and "not valid JSON" in result.output and "Traceback" not in result.output


def test_llama_7b_on_cpu_says_how_much_it_needs():
    result = invoke(*QUICK, "--model", "llama-7b")
    text = " ".join(result.output.split())
    assert result.exit_code != 0 and "needs ~" in text and "weights 12.55" in text


# --- GPU --------------------------------------------------------------------------------------

GPU_BACKENDS = backend_params("vllm-fa2", "vllm-fa3", "vllm-triton")  # every graph-safe kernel backend


@pytest.mark.parametrize("backend", GPU_BACKENDS)
class TestGPU:
    """Each kernel backend under CUDA graphs; tiny's head dim 64 is in the device pack's FA2 JIT cache."""

    pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

    @pytest.mark.parametrize("chunk_size", [None, 16], ids=["whole-prefill", "chunked"])
    def test_unified_split_graph_eager_and_the_oracle_agree(self, backend, chunk_size):
        model = random_model(TINY, torch.bfloat16, "cuda", seed=7)
        prompts = make_prompts(3, 40, TINY.vocab_size, seed=7)  # 3 rows replay the 4-row bucket: one padding row
        runs = {}
        for strategy in ("unified", "split"):
            for cudagraph in (GraphMode.DECODE, GraphMode.NONE):
                engine = make_engine(model, strategy, backend, chunk_size=chunk_size, cudagraph=cudagraph)
                runs[(strategy, cudagraph)] = engine.generate(prompts, 24, record_logits=True)
                again = engine.generate(prompts, 24)
                assert again.tokens == runs[(strategy, cudagraph)].tokens, "a replay is not repeatable"
        assert any(s.graph for s in runs[("unified", GraphMode.DECODE)].steps)
        oracle = make_engine(model, "unified", "reference", chunk_size=chunk_size).generate(prompts, 24, record_logits=True)
        ref = runs[("unified", GraphMode.NONE)]
        for key, run in [*runs.items(), (("reference", GraphMode.NONE), oracle)]:
            result = compare_generations(ref.tokens, ref.logits, run.tokens, run.logits)
            assert result.verdict in ("match", "near-tie"), (key, result)
            assert result.max_logit_diff < 0.1 * result.logit_scale, (key, result)

    def test_agreement_catches_a_graph_that_reads_stale_metadata(self, backend, monkeypatch):
        """The seed's bug class, garbage only under CUDA graphs: KV lengths never copied into the
        graph's buffers (they keep capture's zeros). The graph-vs-eager check must say MISMATCH."""
        model = random_model(TINY, torch.bfloat16, "cuda", seed=8)
        prompts = make_prompts(2, 20, TINY.vocab_size, seed=8)
        eager = make_engine(model, "unified", backend).generate(prompts, 8, record_logits=True)
        broken = make_engine(model, "unified", backend, cudagraph=GraphMode.DECODE)
        monkeypatch.setattr(broken.decode, "_kv_buffers", lambda md: (torch.zeros_like(DecodeGraphs._kv_buffers(md)[0]),
                                                                       DecodeGraphs._kv_buffers(md)[1]))
        run = broken.generate(prompts, 8, record_logits=True)
        assert compare_generations(eager.tokens, eager.logits, run.tokens, run.logits).verdict == "MISMATCH"

    def test_cli_runs_with_graphs(self, backend, tmp_path):
        out = tmp_path / "run"
        result = invoke("--model", "tiny", "--warmup", "1", "--iters", "2", "--input-len", "24", "--output-len", "8",
                        "--batch-size", "1,3", "--chunk-size", "16", "--backend", backend, "--out", str(out))
        assert result.exit_code == 0, result.output
        df = pd.read_csv(out / "results.csv")
        assert (df["mode"] == "graph").all() and (df["graph_steps_per_run"] > 0).all()
        assert (df["verdict"] == "pass").all(), df[["strategy", "batch_size", "verdict", "reason"]]
        assert set(pd.read_csv(out / "agreement.csv")["verdict"]) <= {"match", "near-tie"}


def test_a_default_backend_lacking_a_compared_strategy_is_left_out_and_said(monkeypatch):
    """flashinfer-ba has unified only: the default e2e run leaves it out (said once) instead of
    refusing the whole run; named with --backend, it stays for check_setup to judge."""
    from types import SimpleNamespace

    import attnbench.e2e.args as e2e_args

    found = {"full": SimpleNamespace(strategies=("unified", "split")), "half": SimpleNamespace(strategies=("unified",))}
    monkeypatch.setattr(e2e_args, "resolve_backends", lambda requested, device: requested or list(found))
    monkeypatch.setattr(e2e_args, "get_backend", found.__getitem__)
    cpu = torch.device("cpu")
    kept, note = e2e_args.run_backends(e2e_args.E2EArgs(), cpu)
    assert kept == ["full"] and "half (no split)" in note and "--backend" in note
    assert e2e_args.run_backends(e2e_args.E2EArgs(strategy=["unified"]), cpu) == (["full", "half"], "")
    assert e2e_args.run_backends(e2e_args.E2EArgs(backend=["half"]), cpu) == (["half"], "")
