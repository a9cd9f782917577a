"""fused_ops.gemv, a decode step's matrix-vector product in one launch without split-K, against a
float64 product written here, and the model's choice of it (Transformer.use_projection).
benchmarks/e2e_floor.py times it beside cuBLAS per projection shape and in the step.

Tolerance: float32 accumulation over K terms, then one rounding to the output dtype: an output is
within one unit in the last place of its dtype of the float64 value, plus K x 2^-24 of the sum of
the terms' magnitudes. Under Triton's interpreter every block configuration runs (shapes that are
no multiple of any block, so every mask matters); on a GPU the autotuned launch runs, eagerly and
replayed from a CUDA graph on a new input.
"""

from __future__ import annotations

import pytest
import torch
from conftest import rel_l2
from gpu_e2e import backend_params
from interpreter import interpreter_tests

from attnbench.e2e import elementwise
from attnbench.e2e.elementwise import PROJECTIONS, choose_projections
from attnbench.e2e.model import ModelArgs, random_model
from attnbench.e2e.modes import GraphMode
from attnbench.e2e.runner import ModelEngines
from attnbench.errors import UsageError

ULP = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}  # half a unit: round to nearest
SHAPES = [(1, 37, 300), (3, 129, 1000), (1, 8, 64)]  # rows, outputs N, inputs K


def gemv_case(rows: int, n_out: int, k_in: int, dtype: torch.dtype, device: str, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, k_in, generator=gen).to(dtype).to(device)
    w = torch.randn(n_out, k_in, generator=gen).to(dtype).to(device)
    return x, w


def check_gemv(got: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> None:
    want = x.double() @ w.double().T
    magnitude = x.double().abs() @ w.double().abs().T
    assert got.dtype == x.dtype and got.shape == want.shape and not got.isnan().any()
    excess = (got.double() - want).abs() - 2 * ULP[x.dtype] * want.abs() - x.shape[1] * 2.0 ** -24 * magnitude
    assert excess.max().item() <= 0, f"worst excess: {excess.max().item()}"


def test_linear_is_the_default_and_gemv_is_refused_off_cuda():
    model = random_model(ModelArgs.from_name("tiny"), torch.bfloat16, "cpu")
    assert PROJECTIONS == ("linear", "gemv", "auto") and model.projection == "linear"
    assert model.layers[0].attention.linear is torch.nn.functional.linear and model.projection_choices == {}
    for kind in ("gemv", "auto"):
        with pytest.raises(UsageError, match=f"projection {kind}: a Triton kernel, it needs a CUDA device"):
            model.use_projection(kind)
    with pytest.raises(UsageError, match="projection: unknown 'cublas'; choose from linear, gemv, auto"):
        model.use_projection("cublas")
    assert model.projection == "linear"


def test_auto_takes_the_gemv_only_where_it_timed_under_the_margin():
    """choose_projections with a stand-in clock: per shape, each way's median over the rounds; the
    GEMV below AUTO_MARGIN of F.linear's wins, a near tie keeps F.linear."""
    weights = {(8, 64): [torch.zeros(8, 64)] * 2, (16, 64): [torch.zeros(16, 64)], (4, 32): [torch.zeros(4, 32)]}
    gemv_over_linear = {8: 0.90, 16: 0.99, 4: 1.20}  # by the shape's N
    gemv_calls, ticks = [], iter(range(1000))

    def gemv(x, w):
        gemv_calls.append(w.shape[0])
        return x @ w.T

    def time_us(calls):
        before = len(gemv_calls)
        outs = calls()  # the way's calls on every weight of the shape
        n_out = outs[0].shape[-1]
        factor = gemv_over_linear[n_out] if len(gemv_calls) > before else 1.0
        noise = 1 + (next(ticks) % 3 - 1) * 0.001  # medians, not means: a little noise either way
        return len(outs) * 10.0 * factor * noise

    chosen = choose_projections(weights, gemv, time_us)
    assert {shape: c.choice for shape, c in chosen.items()} == {(8, 64): "gemv", (16, 64): "linear", (4, 32): "linear"}
    assert chosen[(8, 64)].linear_us == pytest.approx(10.0, rel=0.01) and chosen[(8, 64)].gemv_us == pytest.approx(9.0, rel=0.01)
    assert chosen[(8, 64)].describe((8, 64)) == "8x64 gemv (linear 10.0 us, gemv 9.0 us)"
    assert gemv_calls.count(8) == 2 * elementwise.AUTO_ROUNDS  # both weights of the shape, every round


def test_auto_routes_each_shape_as_chosen_and_many_rows_to_linear(monkeypatch):
    """The projection "auto" returns: the GEMV for one token row of a chosen shape, F.linear for the
    other shapes and for any step of several rows."""
    calls = []

    class Ops:
        @staticmethod
        def gemv(x, w):
            calls.append(tuple(w.shape))
            return x @ w.T
    monkeypatch.setattr(elementwise, "triton_kernels", lambda choice, device: Ops)
    with pytest.raises(ValueError, match="give the per-shape choices"):
        elementwise.projection("auto", "cpu")
    call = elementwise.projection("auto", "cpu", {(8, 64): "gemv", (16, 64): "linear"})
    x1, x3 = torch.randn(1, 64), torch.randn(3, 64)
    for x in (x1, x3):
        for w in (torch.randn(8, 64), torch.randn(16, 64)):
            assert torch.allclose(call(x, w), x @ w.T)
    assert calls == [(8, 64)]  # one token row and a chosen shape: the only GEMV call


def test_a_shape_mismatch_is_refused_before_any_launch():
    ops = pytest.importorskip("attnbench.e2e.fused_ops", reason="triton does not import")
    x, w = gemv_case(1, 8, 64, torch.bfloat16, "cpu")
    with pytest.raises(ValueError, match="do not multiply"):
        ops.gemv(x, w[:, :32])
    assert ops.gemv_config(8, 64) == "not tuned"


test_the_kernel_under_triton_s_interpreter_matches_float64, interpreted, ops = interpreter_tests(__file__)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows, n_out, k_in", SHAPES)
def test_interpreted_gemv_matches_float64_in_every_configuration(interpreted, rows, n_out, k_in, dtype):
    x, w = gemv_case(rows, n_out, k_in, dtype, "cpu")
    for config in interpreted.GEMV_CONFIGS:
        check_gemv(interpreted.gemv(x, w, config), x, w)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
class TestOnCuda:
    @pytest.mark.parametrize("rows, n_out, k_in", SHAPES + [(1, 12288, 4096), (1, 4096, 11008), (2, 32000, 4096)])
    def test_autotuned(self, ops, rows, n_out, k_in):
        x, w = gemv_case(rows, n_out, k_in, torch.bfloat16, "cuda")
        check_gemv(ops.gemv(x, w), x, w)
        assert ops.gemv_config(n_out, k_in).startswith("BLOCK_N=")

    def test_replayed_from_a_graph_on_a_new_input(self, ops):
        x, w = gemv_case(1, 4096, 4096, torch.bfloat16, "cuda")
        ops.gemv(x, w)  # tunes outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = ops.gemv(x, w)
        x.copy_(gemv_case(1, 4096, 4096, torch.bfloat16, "cuda", seed=1)[0])
        graph.replay()
        torch.cuda.synchronize()
        check_gemv(y, x, w)

    @pytest.mark.parametrize("backend", backend_params("vllm-fa2"))
    @pytest.mark.parametrize("cudagraph", [GraphMode.NONE, GraphMode.DECODE])
    def test_a_model_on_gemv_computes_what_it_does_on_linear(self, backend, cudagraph):
        """The 9-token prefill runs F.linear either way, so the first token and the KV cache are
        the same bits; the first decode step is the gemv's (one token row), and another summation
        order: its logits within bf16's error of the F.linear model's."""
        model = random_model(ModelArgs.from_name("tiny"), torch.bfloat16, "cuda")
        runs, choices = {}, {}
        try:
            for kind in PROJECTIONS:
                engine = ModelEngines(model.use_projection(kind), max_num_seqs=1, max_model_len=32).engine(
                    backend, "unified", cudagraph)
                runs[kind], choices[kind] = engine.generate([[3] * 9], 2, record_logits=True), model.projection_choices
        finally:
            model.use_projection("linear")
        assert set(choices["auto"]) == set(model.projection_weights()) and choices["linear"] == choices["gemv"] == {}
        assert all(c.choice in ("gemv", "linear") and c.linear_us > 0 and c.gemv_us > 0 for c in choices["auto"].values())
        for kind in ("gemv", "auto"):  # "auto" is F.linear or the GEMV per shape: within the same bounds
            assert torch.equal(runs[kind].logits[0, 0], runs["linear"].logits[0, 0])
            assert runs[kind].tokens[0][0] == runs["linear"].tokens[0][0]
            assert rel_l2(runs[kind].logits[0, 1], runs["linear"].logits[0, 1]) < 1e-2


def test_the_floor_benchmark_takes_auto_among_its_engines():
    import argparse
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    import e2e_floor

    assert e2e_floor.engine_list("torch+linear,triton+auto") == ["torch+linear", "triton+auto"]
    with pytest.raises(argparse.ArgumentTypeError, match="PROJECTION one of linear, gemv, auto"):
        e2e_floor.engine_list("triton+cublas")
