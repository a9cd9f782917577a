"""The flex backend (torch FlexAttention over the paged cache) against the float32 reference.

On the CPU flex runs eagerly, on torch's dense path, which applies the mask_mod to every
(query, slot) pair and ignores the BlockMask's page lists; so the page lists are checked on
their own, against a visibility matrix spelled out from the block table. On a GPU the compiled
kernels read only those lists: the GPU class checks them end to end, eager and graph-replayed.
"""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from conftest import rel_l2
from test_backend_contract import no_host_reads
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.kernels.backends import flex
from attnbench.kernels.backends.flex import FlexBackend
from attnbench.kernels.backends.flex_mask import PagedLayout, build_mask
from attnbench.kernels.backends.reference import reference_attention
from attnbench.kernels.backends.registry import REGISTRY
from attnbench.kernels.check import REL_L2_TOLERANCE, check_output
from attnbench.kernels.inputs import make_inputs
from attnbench.kernels.metadata import build_block_table, build_metadata
from attnbench.kernels.sweep import PointRunner, SweepPlan
from attnbench.kernels.timing import TimingConfig
from attnbench.kernels.workload import KINDS, Batch, SweepPoint

FLEX = FlexBackend()
CPU = torch.device("cpu")
SHAPES = {"gqa": (4, 2), "mha": (4, 4)}  # (heads, kv heads)


def point(kind: str, shape=SHAPES["gqa"], num_tokens: int = 40, dim: int = 32, **kw) -> SweepPoint:
    heads, kv_heads = shape
    return SweepPoint(kind=kind, num_tokens=num_tokens, num_heads=heads, num_kv_heads=kv_heads, head_dim=dim,
                      context=kw.pop("context", "uniform:1:80"), prefill_len=kw.pop("prefill_len", 16), **kw)


def reference(inputs) -> torch.Tensor:
    b = inputs.batch
    return reference_attention(inputs.q, inputs.k_cache, inputs.v_cache, list(b.query_lens), list(b.kv_lens),
                               inputs.block_table.to(inputs.device), inputs.point.causal, inputs.point.softmax_scale)


def run_plan(strategy: str, inputs):
    """The planned strategy run once under the no-host-reads guard, into a NaN-poisoned output."""
    metadata = build_metadata(strategy, inputs.batch, inputs.block_table).to(inputs.device)
    plan = FLEX.plan(strategy, inputs.point, metadata)
    out = torch.full_like(inputs.q, float("nan"))
    with no_host_reads():
        plan.run(inputs.q, inputs.k_cache, inputs.v_cache, out)
    return plan, out


# --- CPU: correctness on every batch kind --------------------------------------------------------

@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
@pytest.mark.parametrize("kind", KINDS)
def test_unified_and_split_match_the_reference(kind, shape, causal):
    inputs = make_inputs(point(kind, shape, causal=causal), "cpu")
    ref = reference(inputs)
    for strategy in ("unified", "split"):
        assert FLEX.supports(inputs.point, strategy, CPU) is None
        plan, out = run_plan(strategy, inputs)
        check = check_output(out, ref, inputs.point.dtype)
        assert check["verdict"] == "pass", (strategy, check["reason"])
        assert plan.details["flex_mode"] == "eager" and plan.details["compile_s"] is None


def test_larger_pages_and_fp16_match_the_reference():
    inputs = make_inputs(point("mixed", num_tokens=60, block_size=32, dtype="fp16", context="uniform:20:150"), "cpu")
    ref = reference(inputs)
    for strategy in ("unified", "split"):
        assert rel_l2(run_plan(strategy, inputs)[1], ref) < REL_L2_TOLERANCE["float16"]


# --- the page lists the compiled kernels read -----------------------------------------------------

def visibility(q_lens, kv_lens, table, block_size, causal, slots) -> torch.Tensor:
    """[query tokens, slots]: True where a token may see a slot, spelled out from the table."""
    seen = torch.zeros((sum(q_lens), slots), dtype=torch.bool)
    token = 0
    for seq, (q_len, kv_len) in enumerate(zip(q_lens, kv_lens)):
        for i in range(q_len):
            last = kv_len - q_len + i if causal else kv_len - 1
            for pos in range(last + 1):
                seen[token, table[seq][pos // block_size] * block_size + pos % block_size] = True
            token += 1
    return seen


@pytest.mark.parametrize("block_size", [16, 32])
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("q_block,pack", [(16, 1), (64, 1), (16, 4), (32, 8)])
def test_page_lists_cover_every_visible_slot_and_full_pages_are_entirely_visible(q_block, pack, causal, block_size):
    q_lens = [1, 1, 3, 70, 1, 20, 2, 1]
    kv_lens = [5, 40, 3, 90, 17, 20, 66, 1]
    batch = Batch(tuple(q_lens), tuple(kv_lens), (False,) * len(q_lens))
    table = build_block_table(batch, block_size, seed=3).tolist()
    launches = [(PagedLayout(1, sum(q_lens), pack, q_block, "flex_attention", ()), q_lens, kv_lens, table)]
    decode = [i for i, q in enumerate(q_lens) if q == 1]  # the split decode part: one entry per sequence
    launches.append((PagedLayout(len(decode), 1, 1, 16, "flex_decoding", ()), [1] * len(decode),
                     [kv_lens[i] for i in decode], [table[i] for i in decode]))
    for layout, q, kv, rows in launches:
        mask, slots, _ = build_mask(layout, q, kv, rows, block_size, causal, CPU)
        # row r of an entry is token r // pack: every head of a token's group sees what the token sees
        seen = visibility(q, kv, rows, block_size, causal, slots).view(layout.batch, layout.tokens, slots)
        seen = seen.repeat_interleave(layout.pack, dim=1)
        covered = torch.zeros_like(seen)
        for b in range(layout.batch):
            for tile in range(mask.kv_num_blocks.shape[-1]):
                tile_rows = slice(tile * layout.q_block, (tile + 1) * layout.q_block)
                for counts, indices, full in [(mask.kv_num_blocks, mask.kv_indices, False),
                                              (mask.full_kv_num_blocks, mask.full_kv_indices, True)]:
                    for page in indices[b, 0, tile, :counts[b, 0, tile]].tolist():
                        cols = slice(page * block_size, (page + 1) * block_size)
                        if full:
                            assert seen[b, tile_rows, cols].all(), (layout.kernel, b, tile, page)
                        covered[b, tile_rows, cols] = True
        assert not (seen & ~covered).any(), f"{layout.kernel}: a visible slot sits in a page no tile lists"
        # the mask_mod alone must say the same as the table, slot by slot
        b, r, s = (torch.arange(n).view(*shape) for n, shape in
                   ((layout.batch, (-1, 1, 1)), (seen.shape[1], (1, -1, 1)), (slots, (1, 1, -1))))
        assert torch.equal(mask.mask_mod(b, torch.tensor(0), r, s), seen), layout.kernel


def test_pages_shared_by_two_sequences_are_refused():
    layout = PagedLayout(1, 2, 1, 16, "flex_attention", ())
    with pytest.raises(ValueError, match="shared by two sequences"):
        build_mask(layout, [1, 1], [10, 10], [[3], [3]], 16, True, CPU)


def test_points_too_big_for_the_mask_or_the_eager_path_are_skipped_with_a_reason(monkeypatch):
    big = point("decode", num_tokens=4096, context="4096", dim=128, shape=(32, 8))
    assert "runs eagerly on dense scores" in FLEX.supports(big, "unified", CPU)
    monkeypatch.setattr(flex, "MAX_MASK_ENTRIES", 10)
    assert "BlockMask would list" in FLEX.supports(point("decode"), "split", CPU)


@pytest.mark.parametrize("tokens, shape, refused", [(500, (32, 32), False), (1000, (32, 32), True),
                                                   (1000, (12, 12), False), (500, (64, 64), True)])
def test_caches_past_int32_offsets_are_refused_on_cuda(monkeypatch, tokens, shape, refused):
    """The seed table's decode points at context 1024: 1000 x 32 x 128 spans 4.2e9 K elements, which
    crashed the H200 sweep with an illegal memory access; 500 x 32 x 128 (2.1e9) stays below 2^31."""
    monkeypatch.setattr(flex, "find_spec", lambda name: object())  # as if triton were installed
    p = point("decode", num_tokens=tokens, context="1024", dim=128, shape=shape)
    reason = FLEX.supports(p, "unified", torch.device("cuda"))
    assert (reason is not None and "int32 offsets" in reason) == refused, reason
    assert FLEX.supports(p, "unified", CPU) is None or "int32" not in FLEX.supports(p, "unified", CPU)


def test_a_plan_over_an_engine_cache_past_the_limit_is_one_error_line():
    """e2e sizes its cache itself, so flex's and flashinfer-ba's plans ask require_cache, not supports."""
    from attnbench.errors import AttnbenchError

    FLEX.require_cache(2**31)
    with pytest.raises(AttnbenchError, match="int32 offsets") as info:
        FLEX.require_cache(2**31 + 1)
    assert "\n" not in str(info.value) and "2,147,483,649" in str(info.value)


def test_flex_is_registered_available_and_declares_what_it_can_do():
    assert REGISTRY["flex"] is not None and REGISTRY["flex"].unavailable_reason() is None
    assert REGISTRY["flex"].library() == ("torch", torch.__version__)
    assert REGISTRY["flex"].strategies == ("unified", "split") and REGISTRY["flex"].graph_safe
    assert "has no fused strategy" in FLEX.supports(point("decode"), "fused", CPU)


def test_the_cli_runs_flex_next_to_the_reference(tmp_path):
    result = CliRunner().invoke(app, ["kernel", "--heads", "4", "--dim", "64", "--tokens", "16,40", "--backend",
                                      "reference,flex", "--budget-ms", "5", "--device", "cpu", "--out", str(tmp_path)],
                                env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    df = pd.read_csv(tmp_path / "results.csv")
    rows = df[df["backend"] == "flex"]
    assert len(rows) == len(KINDS) * 2 * 2  # kinds x tokens x strategies
    assert set(rows["verdict"]) == {"pass"}, rows[["kind", "strategy", "reason"]]
    assert set(rows["library"]) == {"torch"}


def sweep_rows(device: str, point_: SweepPoint, modes: tuple[str, ...]) -> dict:
    plan = SweepPlan(points=(), backends=("flex",), strategies=("unified", "split"), modes=modes,
                     timing=TimingConfig(warmup_ms=1.0, budget_ms=5.0, min_samples=3), device=device)
    rows = list(PointRunner(plan, point_, torch.cuda.get_device_name() if device == "cuda" else None).rows())
    return {(r["strategy"], r["mode"]): r for r in rows}


def test_every_row_records_how_flex_ran():
    rows = sweep_rows("cpu", point("mixed"), ("eager",))
    assert all(r["verdict"] == "pass" for r in rows.values()), rows
    assert rows[("unified", "eager")]["flex_kernel"] == "dense-math"
    assert rows[("split", "eager")]["flex_q_block"] == "16+16"  # decode part, then the 20-token chunk
    assert rows[("split", "eager")]["kernel_launches"] == 2
    assert all(r["flex_mode"] == "eager" and r["compile_s"] is None for r in rows.values())


# --- GPU: the compiled kernels -------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (flex compiles Triton kernels there)")
class TestCompiledFlexOnGPU:
    @staticmethod
    def gpu_point(kind: str, num_tokens: int = 100) -> SweepPoint:
        return SweepPoint(kind=kind, num_tokens=num_tokens, num_heads=32, num_kv_heads=8, head_dim=128,
                          context="uniform:1:1024", prefill_len=256)

    @pytest.mark.parametrize("kind", KINDS)
    def test_unified_and_split_match_the_reference(self, kind):
        inputs = make_inputs(self.gpu_point(kind), "cuda")
        ref = reference(inputs)
        for strategy in ("unified", "split"):
            plan, out = run_plan(strategy, inputs)
            torch.cuda.synchronize()
            assert check_output(out, ref, "bfloat16")["verdict"] == "pass", strategy
            assert plan.details["flex_mode"] == "compiled" and plan.details["compile_s"] > 0
            metadata = build_metadata(strategy, inputs.batch, inputs.block_table).to("cuda")
            again = FLEX.plan(strategy, inputs.point, metadata)
            assert set(again.details["compile_cache"].split("+")) == {"process"}  # compiled once per shape

    @pytest.mark.parametrize("kind", ["decode", "mixed"])
    def test_graph_replay_agrees_with_eager(self, kind):
        from attnbench.kernels.timing import TimedKernel

        inputs = make_inputs(self.gpu_point(kind), "cuda")
        ref = reference(inputs)
        for strategy in ("unified", "split"):
            plan, out = run_plan(strategy, inputs)
            torch.cuda.synchronize()
            eager = out.clone()
            runner = TimedKernel(lambda plan=plan, out=out: plan.run(inputs.q, inputs.k_cache, inputs.v_cache, out),
                                 "graph", torch.device("cuda"))
            out.fill_(float("nan"))
            runner()
            torch.cuda.synchronize()
            assert check_output(out, ref, "bfloat16")["verdict"] == "pass", strategy
            assert rel_l2(out, eager) < 1e-3, strategy

    def test_the_sweep_measures_eager_and_graph_rows_that_pass(self):
        rows = sweep_rows("cuda", self.gpu_point("mixed"), ("eager", "graph"))
        assert sorted(rows) == [("split", "eager"), ("split", "graph"), ("unified", "eager"), ("unified", "graph")]
        assert all(r["verdict"] == "pass" and r["median_ms"] > 0 for r in rows.values()), rows
        assert rows[("split", "eager")]["flex_kernel"] == "flex_decoding+flex_attention"
        assert all(r["flex_mode"] == "compiled" and r["compile_s"] > 0 for r in rows.values())
