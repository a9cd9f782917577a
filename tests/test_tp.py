"""Tensor-parallel e2e on the CPU: the 70B-class presets, shards that are slices of the TP-1 weights
(checked through the Hugging Face names, split by the fixture's own mapping), TP 2 under torchrun
with gloo giving TP 1's greedy tokens, the e2e command at --tp 2, and --tp values refused in one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from model_fixtures import hf_tensors, write_checkpoint
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.e2e.checkpoint import load_hf_checkpoint
from attnbench.e2e.model import ModelArgs, Transformer, random_model
from attnbench.e2e.parallel import TensorParallel, rank_args, random_rank_model

ROOT = Path(__file__).resolve().parent.parent
TINY = ModelArgs.from_name("tiny")
WIDE = ModelArgs(name="wide", n_layer=2, dim=256, n_head=8, n_kv_head=4, ffn_dim=384, vocab_size=512)  # 4 ranks
QUICK = ["--model", "tiny", "--warmup", "1", "--iters", "1", "--device", "cpu", "--input-len", "12",
         "--output-len", "4"]


@pytest.mark.parametrize("name, billions", [("llama-2-70b", 68.98), ("llama-3-70b", 70.55), ("qwen-72b", 72.71)])
def test_70b_presets_load_with_their_parameter_counts(name, billions):
    args = ModelArgs.from_name(name)
    assert (args.n_head, args.n_kv_head, args.head_dim, args.n_layer, args.dim) == (64, 8, 128, 80, 8192)
    counted = sum(p.numel() for p in Transformer(args, torch.bfloat16, "meta").parameters())
    assert counted == args.num_params and counted / 1e9 == pytest.approx(billions, abs=0.01)
    per_rank = sum(p.numel() for p in Transformer(rank_args(args, 2), torch.bfloat16, "meta").parameters())
    assert rank_args(args, 2).num_params == per_rank  # check_fits's weights: one rank's, embeddings replicated
    replicated = (1 if args.tie_embeddings else 2) * args.vocab_size * args.dim + (2 * args.n_layer + 1) * args.dim
    assert per_rank == (counted - replicated) // 2 + replicated


COLUMN = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")  # split by output rows
ROW = ("o_proj", "down_proj")  # split by input columns


def assert_slices_of(whole: dict[str, torch.Tensor], shards: list[dict[str, torch.Tensor]]) -> None:
    assert all(shard.keys() == whole.keys() for shard in shards)
    for name, tensor in whole.items():
        parts = [shard[name] for shard in shards]
        if any(f".{c}." in name for c in COLUMN):
            assert torch.equal(torch.cat(parts, 0), tensor), name
        elif any(f".{r}." in name for r in ROW):
            assert torch.equal(torch.cat(parts, 1), tensor), name
        else:  # embeddings, norms, LM head
            assert all(torch.equal(p, tensor) for p in parts), name


@pytest.mark.parametrize("args, tp", [(TINY, 2), (WIDE, 2), (WIDE, 4)])
def test_random_shards_are_slices_of_the_tp1_weights(args, tp):
    whole = hf_tensors(random_model(args, torch.bfloat16, "cpu", seed=11))
    shards = [hf_tensors(random_rank_model(args, torch.bfloat16, "cpu", 11, TensorParallel(r, tp))) for r in range(tp)]
    assert shards[0]["model.layers.0.self_attn.k_proj.weight"].shape[0] == args.n_kv_head // tp * args.head_dim
    assert_slices_of(whole, shards)


def test_a_checkpoint_loads_as_the_same_shards(tmp_path):
    model = random_model(TINY, torch.bfloat16, "cpu", seed=4)
    path = write_checkpoint(model, tmp_path / "ckpt", shards=2)
    shards = [hf_tensors(load_hf_checkpoint(path, torch.bfloat16, "cpu", tp=TensorParallel(r, 2))) for r in range(2)]
    assert_slices_of(hf_tensors(model), shards)


# --- two ranks under torchrun (gloo) ---------------------------------------------------------

def torchrun(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """python -m torch.distributed.run --standalone (a free port) --nproc-per-node 2, from the repo root."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def test_tp2_gives_the_tokens_of_tp1(tmp_path):
    out = tmp_path / "agreement.json"
    done = torchrun("benchmarks/tp_agreement.py", "--model", "tiny", "--device", "cpu", "--backend", "reference",
                    "--mode", "eager", "--batch-size", "3", "--input-len", "20", "--output-len", "8", "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    rows = json.loads(out.read_text())
    assert [(r["strategy"], r["tp"]) for r in rows] == [("unified", 2), ("split", 2)]
    for row in rows:
        assert row["verdict"] in ("match", "near-tie"), row
        assert row["max_logit_diff"] < 0.1 * row["logit_scale"], row  # bf16 all-reduce rounding, no more


def test_e2e_at_tp2_under_torchrun_writes_one_run_from_rank_0(tmp_path):
    out = tmp_path / "run"
    done = torchrun("-m", "attnbench", "e2e", *QUICK, "--batch-size", "1,3", "--chunk-size", "8", "--tp", "2",
                    "--out", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    df = pd.read_csv(out / "results.csv")
    assert len(df) == 4 and (df["tp"] == 2).all() and (df["verdict"] == "pass").all()
    assert set(pd.read_csv(out / "agreement.csv")["verdict"]) == {"match"}
    env = json.loads((out / "env.json").read_text())["e2e"]
    assert env["tp"]["size"] == 2 and env["tp"]["backend"] == "gloo"
    assert env["attention_per_rank"] == {"num_heads": 2, "num_kv_heads": 1, "head_dim": 64}  # tiny's 4/2 over 2
    assert "tensor parallel: 2 ranks (gloo), 2/1 heads x 64 per rank" in (out / "summary.md").read_text()
    assert done.stdout.count("rows: 4 pass") == 1  # only rank 0 speaks


# --- in one process ---------------------------------------------------------------------------

def invoke(*args):
    return CliRunner().invoke(app, ["e2e", *args])


def test_tp1_rows_record_tp(tmp_path, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    result = invoke(*QUICK, "--batch-size", "2", "--strategy", "unified", "--out", str(tmp_path / "run"))
    assert result.exit_code == 0, result.output
    assert (pd.read_csv(tmp_path / "run" / "results.csv")["tp"] == 1).all()
    assert json.loads((tmp_path / "run" / "env.json").read_text())["e2e"]["tp"] == {"size": 1}


@pytest.mark.parametrize("args, world, needle", [
    (["--tp", "3"], None, "--tp 3: tiny's query heads (4) do not split over 3 ranks"),
    (["--tp", "4"], "4", "--tp 4: tiny's KV heads (2) do not split over 4 ranks"),
    (["--tp", "0"], None, "--tp: must be an integer between 1 and 64"),
    (["--tp", "65"], None, "--tp: must be an integer between 1 and 64"),
    (["--tp", "2"], None, "--tp 2: needs one process per rank; run it under torchrun"),
    (["--tp", "2"], "4", "--tp 2: torchrun started WORLD_SIZE=4 processes"),
    ([], "2", "--tp 1 under torchrun with WORLD_SIZE=2"),
    (["--tp", "2", "--isolate"], "2", "--isolate cannot be combined with --tp 2"),
    (["--tp", "2", "--profile"], "2", "--profile cannot be combined with --tp 2"),
])
def test_bad_tp_is_refused_in_one_line(args, world, needle, monkeypatch):
    if world is None:
        monkeypatch.delenv("WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("WORLD_SIZE", world)
    result = invoke(*QUICK, *args)
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], result.output


def test_e2e_results_from_before_tp_read_as_tp_1(tmp_path):
    """`tp` is part of the e2e key (a TP-2 row never pairs with a TP-1 one); older files lack it."""
    from attnbench.results.read import load_run

    row = {"model": "tiny", "dtype": "bfloat16", "block_size": 16, "chunk_size": 0, "input_len": 8,
           "output_len": 2, "batch_size": 1, "backend": "reference", "strategy": "unified", "mode": "eager",
           "request_p50_s": 0.5, "verdict": "pass"}
    pd.DataFrame([row]).to_csv(tmp_path / "results.csv", index=False)
    run = load_run(tmp_path, "old")
    assert run.rows["tp"].tolist() == [1] and "tp" in run.kind.key
