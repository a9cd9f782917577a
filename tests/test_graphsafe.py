"""Graph safety on the CPU: the seed PR's bug reproduced with fake FA2 ops, and the recipe fixing it.

A CUDA graph replay re-reads device buffers while the launch's host arguments stay as captured.
The CPU stand-in: plan once, rewrite the buffers, call the same plan's `run` again. That is only a
replay for launches that read the metadata tensors when they execute, which these fakes do (they
reuse test_backend_contract's op machinery: schema-named arguments, a stream).

The fake FA2 kernels model how FA2 sizes its launch from the host ints (flash_api.cpp,
flash_fwd_kernel.h), each a worst case of the real kernel:
- varlen_fwd's grid is ceil(max_seqlen_q / kBlockM) row tiles per sequence: the model computes the
  first max_seqlen_q query tokens of each sequence (the real kernel rounds up to a 64/128-row tile);
  with max_seqlen_q == 1 FA2 also drops the causal mask, and so does the model;
- with max_seqlen_q == 1 and GQA, varlen_fwd packs the query heads of a group into the query
  dimension (seqlenq_ngroups_swapped): it reshapes q to [num_seqs, groups, kv_heads, dim], which
  fails unless q has exactly one row per sequence, and reads sequence b's query from row b,
  ignoring cu_seqlens_q; so does the model;
- split-KV partitions are sized from max_seqlen_k (n_blocks_per_split): keys past it are never
  visited when FA2 splits; the model never visits them (the real kernel does when it runs unsplit);
- the batch is the tensors' length (frozen); cu_seqlens_q and seqused_k are read when it runs;
- fwd_kvcache takes its key bound from the block table's width, and its batch from q's shape.
"""

from __future__ import annotations

import csv
import dataclasses
import types

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_backend_contract import Arg, FakeOp, Stream, fake_fa2_ops
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.kernels import graphsafe
from attnbench.kernels.backends import registry
from attnbench.kernels.backends.reference import ReferenceBackend
from attnbench.kernels.backends.vllm_fa2 import VllmFA2Backend, raw_ops_library
from attnbench.kernels.metadata import build_block_table, build_metadata
from attnbench.kernels.verify import gating_failures, replay_cases, verify_rows
from attnbench.kernels.workload import Batch, SweepPoint

POINT = SweepPoint(kind="mixed", num_tokens=4, num_heads=4, num_kv_heads=2, head_dim=32, dtype="bf16")
CASES = {c.name: c for c in replay_cases(short=16, long=80, seqs=4)}


def attend(q, q_len, kv_len, visited, table_row, k_cache, v_cache, causal, scale):
    """float64 attention of q's rows (the first of a q_len-token sequence) over its first `visited` keys."""
    block = k_cache.shape[1]
    pos = torch.arange(visited)
    group = q.shape[1] // k_cache.shape[2]
    keys = k_cache[table_row.long()[pos // block], pos % block].double().repeat_interleave(group, dim=1)
    vals = v_cache[table_row.long()[pos // block], pos % block].double().repeat_interleave(group, dim=1)
    scores = torch.einsum("ihd,jhd->hij", q.double(), keys) * scale
    if causal:  # bottom-right: query i of the sequence sees keys up to kv_len - q_len + i
        hidden = pos[None, :] > (torch.arange(q.shape[0]) + kv_len - q_len)[:, None]
        scores = scores.masked_fill(hidden, float("-inf"))
    probs = torch.nan_to_num(torch.softmax(scores, dim=-1), nan=0.0)
    return torch.einsum("hij,jhd->ihd", probs, vals)


def grid_fa2_ops(stream: Stream):
    """FA2's two ops with vLLM's schema names, computing what FA2's launch grid covers. `writes`
    logs (op, sequence, first row, end row) for every sequence that wrote output."""
    writes: list[tuple] = []
    names = fake_fa2_ops(stream)

    def varlen(kw):
        max_q, max_k = kw["max_seqlen_q"], kw["max_seqlen_k"]
        causal = kw["is_causal"] and max_q > 1  # flash_api.cpp: max_seqlen_q == 1 -> is_causal = false
        cu, used = kw["cu_seqlens_q"].tolist(), kw["seqused_k"].tolist()
        q, kv_heads = kw["q"], kw["k"].shape[2]
        if max_q == 1 and q.shape[1] > kv_heads:  # flash_api.cpp mha_varlen_fwd: seqlenq_ngroups_swapped
            seqs = len(cu) - 1
            shape = [seqs, q.shape[1] // kv_heads, kv_heads, q.shape[2]]
            if q.shape[0] != seqs:
                raise RuntimeError(f"shape '{shape}' is invalid for input of size {q.numel()}")
            cu = list(range(seqs + 1))
        for b, kv_len in enumerate(used):
            start, rows = cu[b], min(cu[b + 1] - cu[b], max_q)
            if rows > 0:
                kw["out"][start:start + rows] = attend(
                    kw["q"][start:start + rows], cu[b + 1] - cu[b], kv_len, min(kv_len, max_k), kw["block_table"][b],
                    kw["k"], kw["v"], causal, kw["softmax_scale"]).to(kw["out"].dtype)
                writes.append(("varlen", b, start, start + rows))

    def kvcache(kw):
        q4, table = kw["q"], kw["block_table"]
        seq_len, bound = q4.shape[1], table.shape[1] * kw["kcache"].shape[1]
        for b, kv_len in enumerate(kw["seqlens_k"].tolist()):
            kw["out"][b] = attend(q4[b], seq_len, kv_len, min(kv_len, bound), table[b], kw["kcache"], kw["vcache"],
                                  kw["is_causal"] and seq_len > 1, kw["softmax_scale"]).to(kw["out"].dtype)
            writes.append(("kvcache", b, b * seq_len, (b + 1) * seq_len))

    def op(like, compute):
        return FakeOp(stream, [Arg(a.name) for a in like.default._schema.arguments], compute)
    return types.SimpleNamespace(varlen_fwd=op(names.varlen_fwd, varlen), fwd_kvcache=op(names.fwd_kvcache, kvcache),
                                 writes=writes)


class Immediate(Stream):
    """A stream that runs each launch as it is enqueued (for callers that never synchronize)."""

    def launch(self, work) -> None:
        self.launches += 1
        work()


def grid_backend(stream: Stream | None = None):
    ops = grid_fa2_ops(stream or Immediate())
    return VllmFA2Backend(raw_ops_library(ops, "fake-fa2-grid", "0")), ops


def check(strategy: str, case: str, policy: str) -> list[dict]:
    stream = Stream()
    backend, _ = grid_backend(stream)
    c = CASES[case]
    return graphsafe.replay_check(backend, strategy, POINT, c.capture, [c.replay], policy, "cpu",
                                  synchronize=stream.synchronize)


@pytest.mark.parametrize("strategy", ["unified", "split"])
@pytest.mark.parametrize("case", list(CASES))
def test_the_safe_recipe_passes_every_replay(strategy, case):
    assert [r["verdict"] for r in check(strategy, case, "safe")] == ["pass", "pass"]


@pytest.mark.parametrize("strategy,case", [("unified", "short -> long context"), ("split", "decode -> mixed")])
def test_naive_reproduces_the_seed_bug(strategy, case):
    """The capture batch replays fine; another batch gets garbage (or, split, prefill rows never run)."""
    base, replay = check(strategy, case, "naive")
    assert base["verdict"] == "pass" and replay["verdict"] == "fail", replay


def test_naive_unified_fa2_cannot_run_a_decode_batch_in_a_mixed_bucket(fakes):
    """What the H200 showed: the decode capture batch frozen at max_seqlen_q == 1 in a bucket of
    more token rows (the mixed batch's) than sequences takes FA2's packed-GQA path, whose reshape
    of q fails; safe's max_seqlen_q (the bucket's longest query) keeps it off that path."""
    base, replay = check("unified", "decode -> mixed", "naive")
    assert base["verdict"] == replay["verdict"] == "fail" and "is invalid for input" in base["reason"]
    rows = verify_rows(["fake-fa2-grid"], ["unified"], ["naive", "safe"], POINT, [CASES["decode -> mixed"]],
                       torch.device("cpu"))
    naive, safe = rows
    assert naive["verdict"] == "FAIL" and naive["reason"].startswith("on the capture batch itself")
    assert not naive["gates"] and safe["verdict"] == "pass" and not gating_failures(rows)


def test_split_decode_is_immune_to_longer_contexts_even_naive():
    """fwd_kvcache bounds keys by the block table's width, not by a host max_seqlen_k."""
    assert [r["verdict"] for r in check("split", "short -> long context", "naive")] == ["pass", "pass"]


def _static(strategy: str, batches: list[Batch]):
    bucket = graphsafe.bucket_for(batches, POINT.block_size)
    tables = [build_block_table(b, POINT.block_size, i) for i, b in enumerate(batches)]
    scratch = max(int(t.max()) for t in tables) + 1
    return graphsafe.static_buffers(strategy, bucket, scratch, "cpu"), [
        build_metadata(strategy, b, t) for b, t in zip(batches, tables)]


def _run_after(strategy: str, policy: str, first: Batch, then: Batch, point: SweepPoint = POINT):
    """Plan on `first`, write `then` over it, run: which sequences wrote which rows."""
    backend, ops = grid_backend()
    buffers, (md_first, md_then) = _static(strategy, [first, then])
    graphsafe.write_batch(buffers, md_first, policy)
    plan = backend.plan(strategy, point, graphsafe.plan_metadata(buffers, md_first, policy))
    graphsafe.write_batch(buffers, md_then, policy)
    q = torch.randn(buffers.num_rows, point.num_heads, point.head_dim, dtype=torch.bfloat16)
    blocks = buffers.scratch_block + 1
    kv = torch.randn(blocks, point.block_size, point.num_kv_heads, point.head_dim, dtype=torch.bfloat16)
    plan.run(q, kv, kv, torch.zeros_like(q))
    return ops.writes, buffers, md_then


def test_padding_sequences_write_nothing_and_stale_tails_write_real_rows():
    """Unified, six decode sequences then one 5-token prefill: safe padding sequences are empty;
    naive's stale cu_seqlens tail (0,5,2,3,...) makes an old sequence overwrite real row 2. No GQA:
    with it, naive's max_seqlen_q == 1 takes FA2's packed path, which cannot run 7 sequences on 6 rows."""
    six = Batch((1,) * 6, (10, 20, 30, 40, 50, 60), (True,) * 6)
    one = Batch((5,), (12,), (False,))
    for policy in ("safe", "naive"):
        writes, _, md = _run_after("unified", policy, six, one, dataclasses.replace(POINT, num_kv_heads=4))
        strays = [w for w in writes if w[1] >= md.num_seqs and w[2] < md.num_tokens]
        assert bool(strays) == (policy == "naive"), (policy, writes)


def test_split_padding_rows_write_only_their_scratch_slots():
    few, more = CASES["fewer -> more sequences"].capture, CASES["fewer -> more sequences"].replay
    writes, buffers, md = _run_after("split", "safe", more, few)
    real = set(graphsafe.real_rows(buffers, md).tolist())
    padding = [w for w in writes if w[1] >= md.decode.num_seqs]
    assert padding and all(not real & set(range(w[2], w[3])) for w in padding)
    table, lens = buffers.metadata.decode.block_table, buffers.metadata.decode.cache_seqlens
    assert (table[md.decode.num_seqs:] == buffers.scratch_block).all() and (lens[md.decode.num_seqs:] == 0).all()


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=6), st.integers(0, 5))
def test_safe_cu_seqlens_are_padded_non_decreasing(query_lens, extra):
    batch = Batch(tuple(query_lens), tuple(q + 3 for q in query_lens), (False,) * len(query_lens))
    roomy = Batch((1,) * (len(query_lens) + extra), (1,) * (len(query_lens) + extra), (False,) * (len(query_lens) + extra))
    buffers, (md, _) = _static("unified", [batch, roomy])
    written = graphsafe.write_batch(buffers, md, "safe")
    cu = buffers.metadata.cu_seqlens_q
    assert torch.equal(cu, written.cu_seqlens_q) and (cu[1:] >= cu[:-1]).all()
    assert int(cu[-1]) == sum(query_lens) and cu.shape[0] == buffers.bucket.max_seqs + 1
    assert (buffers.metadata.seqused_k[len(query_lens):] == 0).all()
    assert (buffers.metadata.block_table[len(query_lens):] == buffers.scratch_block).all()


def test_a_batch_past_the_bucket_is_refused():
    buffers, (md, _) = _static("unified", [Batch((1,), (5,), (True,)), Batch((1,), (5,), (True,))])
    big = build_metadata("unified", Batch((1, 1), (5, 5), (True, True)), torch.zeros((2, 1), dtype=torch.int32))
    with pytest.raises(ValueError, match="does not fit the bucket"):
        graphsafe.write_batch(buffers, big, "safe")


# --- the command ---------------------------------------------------------------------------------

class FakeGridFA2(VllmFA2Backend):
    name = "fake-fa2-grid"

    def __init__(self):
        super().__init__(grid_backend()[0]._library)


class PlanTimeLengths(ReferenceBackend):
    """Claims graph safety but freezes lengths at plan time: safe replays must fail, exit 1."""

    name = "fake-frozen"
    graph_safe = True
    oracle = False


@pytest.fixture
def fakes(monkeypatch):
    for backend in (FakeGridFA2(), PlanTimeLengths()):
        monkeypatch.setitem(registry.REGISTRY, backend.name, backend)


def test_only_safe_failures_of_a_graph_safe_backend_gate(fakes):
    rows = verify_rows(["fake-frozen"], ["unified"], ["naive", "safe"], POINT, [CASES["fewer -> more sequences"]],
                       torch.device("cpu"))
    assert [(r["policy"], r["verdict"], r["gates"]) for r in rows] == [("naive", "FAIL", False), ("safe", "FAIL", True)]
    assert gating_failures(rows) == rows[1:]


def invoke(*args: str):
    return CliRunner().invoke(app, ["verify", "--device", "cpu", "--heads", "4", "--kv-heads", "2", "--dim", "32",
                                    "--contexts", "16,80", *args], env={"COLUMNS": "200"})


def test_verify_reports_naive_findings_and_exits_0_when_safe_passes(fakes, tmp_path):
    result = invoke("--backend", "fake-fa2-grid", "--out", str(tmp_path))
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(open(tmp_path / "verify.csv")))
    assert len(rows) == 2 * 2 * 3 and (tmp_path / "summary.md").exists()
    assert all(r["verdict"] == "pass" for r in rows if r["policy"] == "safe")
    assert {r["case"] for r in rows if r["policy"] == "naive" and r["verdict"] == "FAIL"} == {
        "decode -> mixed", "short -> long context"}


def test_verify_refuses_a_non_empty_out_before_it_runs(fakes, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    result = invoke("--backend", "fake-fa2-grid", "--out", str(tmp_path))
    assert result.exit_code == 1 and "is not empty" in result.output and "Traceback" not in result.output
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"] and "pass" not in result.output


def test_verify_records_what_it_wrote_and_a_rerun_into_it_is_refused(fakes, tmp_path):
    out = tmp_path / "run"
    assert invoke("--backend", "fake-fa2-grid", "--out", str(out)).exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == [".attnbench-files.json", "summary.md", "verify.csv"]
    again = invoke("--backend", "fake-fa2-grid", "--out", str(out))
    assert again.exit_code == 1 and "is not empty" in again.output and "Traceback" not in again.output


def test_verify_exits_1_when_a_graph_safe_backend_fails_safe(fakes):
    result = invoke("--backend", "fake-frozen", "--strategy", "unified", "--policy", "safe")
    assert result.exit_code == 1 and "FAIL" in result.output


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks what verify does without a GPU")
def test_verify_without_a_gpu_runs_what_the_cpu_judges_and_says_so(tmp_path):
    """As kernel and e2e do: the CPU's defaults, said in one line (it was refused without --device cpu)."""
    result = CliRunner().invoke(app, ["verify", "--out", str(tmp_path / "v")])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert [line for line in result.output.splitlines() if line.startswith("CPU run:")] and "6 pass" in result.output


# --- on the GPU ---------------------------------------------------------------------------------

@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU: replays real CUDA graphs")
class TestOnTheGPU:
    @pytest.mark.parametrize("name", ["vllm-fa2", "vllm-fa3", "vllm-triton"])
    def test_safe_replays_pass_and_naive_is_reported(self, name):
        reason = registry.REGISTRY[name].unavailable_reason()
        if reason:
            pytest.skip(f"{name}: {reason}")
        point = dataclasses.replace(POINT, num_heads=32, num_kv_heads=8, head_dim=128)
        rows = verify_rows([name], ["unified", "split"], ["naive", "safe"], point,
                           replay_cases(512, 4096), torch.device("cuda"))
        for r in rows:
            print(r["backend"], r["strategy"], r["policy"], r["case"], r["verdict"], r["reason"])
        assert not gating_failures(rows)
        assert all(r["verdict"] == "pass" for r in rows if r["policy"] == "safe")
