"""fused_ops.gemv, a decode step's matrix-vector product in one launch without split-K, against a
float64 product written here. benchmarks/e2e_floor.py times it beside cuBLAS per projection shape.

Tolerance: float32 accumulation over K terms, then one rounding to the output dtype: an output is
within one unit in the last place of its dtype of the float64 value, plus K x 2^-24 of the sum of
the terms' magnitudes. Under Triton's interpreter every block configuration runs (shapes that are
no multiple of any block, so every mask matters); on a GPU the autotuned launch runs, eagerly and
replayed from a CUDA graph on a new input.
"""

from __future__ import annotations

import pytest
import torch
from interpreter import interpreter_tests

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


def test_a_shape_mismatch_is_refused_before_any_launch():
    ops = pytest.importorskip("attnbench.e2e.fused_ops", reason="triton does not import")
    x, w = gemv_case(1, 8, 64, torch.bfloat16, "cpu")
    with pytest.raises(ValueError, match="do not multiply"):
        ops.gemv(x, w[:, :32])
    assert ops.gemv_config(8, 64) == "not tuned"


test_the_kernel_under_triton_s_interpreter_matches_float64, interpreted = interpreter_tests(__file__)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows, n_out, k_in", SHAPES)
def test_interpreted_gemv_matches_float64_in_every_configuration(interpreted, rows, n_out, k_in, dtype):
    x, w = gemv_case(rows, n_out, k_in, dtype, "cpu")
    for config in interpreted.GEMV_CONFIGS:
        check_gemv(interpreted.gemv(x, w, config), x, w)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
class TestOnCuda:
    @pytest.fixture(scope="class")
    def ops(self):
        return pytest.importorskip("attnbench.e2e.fused_ops", reason="triton does not import")

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
