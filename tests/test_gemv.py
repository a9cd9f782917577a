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

from attnbench.e2e.elementwise import PROJECTIONS
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
    assert PROJECTIONS == ("linear", "gemv") and model.projection == "linear"
    assert model.layers[0].attention.linear is torch.nn.functional.linear
    with pytest.raises(UsageError, match="projection gemv: a Triton kernel, it needs a CUDA device"):
        model.use_projection("gemv")
    with pytest.raises(UsageError, match="projection: unknown 'cublas'; choose from linear, gemv"):
        model.use_projection("cublas")
    assert model.projection == "linear"


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
        runs = {}
        try:
            for kind in PROJECTIONS:
                engine = ModelEngines(model.use_projection(kind), max_num_seqs=1, max_model_len=32).engine(
                    backend, "unified", cudagraph)
                runs[kind] = engine.generate([[3] * 9], 2, record_logits=True)
        finally:
            model.use_projection("linear")
        assert torch.equal(runs["gemv"].logits[0, 0], runs["linear"].logits[0, 0])
        assert runs["gemv"].tokens[0][0] == runs["linear"].tokens[0][0]
        assert rel_l2(runs["gemv"].logits[0, 1], runs["linear"].logits[0, 1]) < 1e-2
