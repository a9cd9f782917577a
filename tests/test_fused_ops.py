"""The model's elementwise ops as Triton kernels (attnbench/e2e/fused_ops.py) against a float64
reference written plainly here, and the switch that picks them (attnbench/e2e/elementwise.py).

Three groups: on the CPU, the switch's fallbacks (always); where triton imports, the kernels under
Triton's interpreter on CPU tensors (CI installs no triton: skipped with the reason); on a GPU, the
kernels on CUDA, eager and replayed from a captured CUDA graph on new inputs, and a tiny e2e run
under full graphs whose graph and eager tokens match.

Tolerance: the kernels compute in float32 and round once, so an element is within one unit in the
last place of its dtype (2^-7 relative for bf16, 2^-10 for fp16) of the float64 value; the
interpreter rounds float32 to bf16 by truncation, which also stays within one unit.
"""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest
import torch
from interpreter import interpreter_tests
from gpu_e2e import cli_graph_run

import attnbench.e2e
from attnbench.e2e import elementwise
from attnbench.e2e.elementwise import fused
from attnbench.kernels.backends.registry import get_backend

DTYPES = [torch.bfloat16, torch.float16]
ULP = {torch.bfloat16: 2.0 ** -7, torch.float16: 2.0 ** -10}
EPS = 1e-5


# the float64 reference, from the definitions (not the model's helpers)

def norm64(h: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    h = h.double()
    return weight.double() * h / torch.sqrt((h * h).mean(-1, keepdim=True) + EPS)


def rope64(x: torch.Tensor, angles: torch.Tensor) -> torch.Tensor:
    """Pair (x[i], x[i + d/2]) as the complex number x[i] + j x[i + d/2], turned by angles[:, i]."""
    half = x.shape[-1] // 2
    x = x.double()
    z = torch.complex(x[..., :half], x[..., half:]) * torch.polar(torch.ones_like(angles), angles)[:, None, :]
    return torch.cat([z.real, z.imag], dim=-1)


def silu_mul64(gate_up: torch.Tensor) -> torch.Tensor:
    gate, up = gate_up.double().chunk(2, dim=-1)
    return gate / (1 + torch.exp(-gate)) * up


def assert_close(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> None:
    """Within one unit in the last place (and float32's own error) of the float64 value."""
    assert got.dtype == dtype and got.shape == want.shape
    excess = (got.double() - want).abs() - (ULP[dtype] + 1e-5) * want.abs()
    assert excess.max().item() <= 1e-5, f"worst excess over one ulp: {excess.max().item()}"


# the cases, drawn with a seed on the device

def norm_case(tokens: int, dim: int, dtype, device):
    gen = torch.Generator(device=device).manual_seed(tokens * dim)
    x, residual = (torch.randn(tokens, dim, generator=gen, device=device).to(dtype) for _ in range(2))
    return x, residual, (torch.rand(dim, generator=gen, device=device) + 0.5).to(dtype)


def rope_case(tokens: int, heads: int, kv_heads: int, head_dim: int, dtype, device):
    """q and k as the model passes them: views of one qkv row (row stride = the whole qkv width)."""
    gen = torch.Generator(device=device).manual_seed(tokens + 7 * heads + head_dim)
    qkv = torch.randn(tokens, (heads + 2 * kv_heads) * head_dim, generator=gen, device=device).to(dtype)
    q, k, _ = qkv.split([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    angles = torch.rand(tokens, head_dim // 2, generator=gen, device=device, dtype=torch.float64) * 100
    return q.view(tokens, heads, head_dim), k.view(tokens, kv_heads, head_dim), angles


def gate_up_case(tokens: int, ffn: int, dtype, device):
    gen = torch.Generator(device=device).manual_seed(tokens + ffn)
    return torch.randn(tokens, 2 * ffn, generator=gen, device=device).to(dtype) * 3


def check_norms(ops, tokens: int, dim: int, dtype, device) -> None:
    x, residual, weight = norm_case(tokens, dim, dtype, device)
    assert_close(ops.rms_norm(x, weight, EPS), norm64(x, weight), dtype)
    normed, summed = ops.add_rms_norm(x, residual, weight, EPS)
    assert_close(summed, x.double() + residual.double(), dtype)
    assert_close(normed, norm64(summed, weight), dtype)


def check_rope(ops, tokens: int, heads: int, kv_heads: int, head_dim: int, dtype, device) -> None:
    q, k, angles = rope_case(tokens, heads, kv_heads, head_dim, dtype, device)
    assert tokens == 1 or q.stride(0) == k.stride(0) == (heads + 2 * kv_heads) * head_dim  # strided views
    q_out, k_out = ops.rope_qk(q, k, angles.cos().float(), angles.sin().float())
    assert_close(q_out, rope64(q, angles), dtype)
    assert_close(k_out, rope64(k, angles), dtype)


def check_silu(ops, tokens: int, ffn: int, dtype, device) -> None:
    gate_up = gate_up_case(tokens, ffn, dtype, device)
    assert_close(ops.silu_and_mul(gate_up), silu_mul64(gate_up), dtype)


# the switch, on the CPU

@pytest.fixture
def fresh_switch(monkeypatch):
    """fused.status and the cached fused_ops import as a process starts, restored afterwards."""
    monkeypatch.setattr(fused, "status", fused.status)
    elementwise.triton_ops.cache_clear()
    yield
    elementwise.triton_ops.cache_clear()


def test_the_cpu_path_is_the_plain_function():
    op = fused(lambda x, y: x + y)
    assert torch.equal(op(torch.ones(3), 2), torch.full((3,), 3.0)) and op.kernel is None


def test_without_triton_cuda_runs_plain_torch_and_says_why(fresh_switch, monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # `import triton` raises ImportError
    monkeypatch.delitem(sys.modules, "attnbench.e2e.fused_ops", raising=False)
    monkeypatch.delattr(attnbench.e2e, "fused_ops", raising=False)  # else `from` finds the attribute
    op, cuda_like = fused(lambda x: "plain"), SimpleNamespace(is_cuda=True)
    assert op(cuda_like) == "plain" and op.kernel is op.fn
    assert fused.status.startswith("plain torch: triton does not import (ModuleNotFoundError"), fused.status


def test_a_failing_kernel_falls_back_for_that_op_and_the_status_says_which(fresh_switch):
    def silu_and_mul(x):
        return "plain"

    def launch(x):
        raise RuntimeError("no kernel image")

    op = fused(silu_and_mul)
    op.kernel, fused.status = launch, fused.KERNELS
    with pytest.warns(UserWarning, match="silu_and_mul runs plain torch"):
        assert op(SimpleNamespace(is_cuda=True)) == "plain"
    assert op.kernel is op.fn and fused.status.startswith(fused.KERNELS + "; silu_and_mul runs plain torch")
    assert "RuntimeError('no kernel image')" in fused.status


# the kernels under Triton's interpreter, on CPU tensors

test_the_kernels_under_triton_s_interpreter_match_float64, interpreted, ops = interpreter_tests(__file__)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens, dim", [(1, 64), (7, 96), (3, 1000)])
def test_interpreted_norms_match_float64(interpreted, tokens, dim, dtype):
    check_norms(interpreted, tokens, dim, dtype, "cpu")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens, heads, kv_heads, head_dim", [
    (1, 4, 4, 64), (5, 4, 2, 128), (3, 6, 1, 256), (2, 40, 8, 256)])  # the last: two head blocks a token
def test_interpreted_rope_matches_float64(interpreted, tokens, heads, kv_heads, head_dim, dtype):
    check_rope(interpreted, tokens, heads, kv_heads, head_dim, dtype, "cpu")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("tokens, ffn", [(1, 80), (3, 1100)])
def test_interpreted_silu_and_mul_matches_float64(interpreted, tokens, ffn, dtype):
    check_silu(interpreted, tokens, ffn, dtype, "cpu")


# the kernels on a GPU

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
class TestOnCuda:
    @pytest.mark.parametrize("dtype", DTYPES)
    @pytest.mark.parametrize("tokens, dim", [(1, 4096), (17, 5120), (16385, 8192)])
    def test_norms(self, ops, tokens, dim, dtype):
        check_norms(ops, tokens, dim, dtype, "cuda")
        x, residual, weight = norm_case(tokens, dim, dtype, "cuda")
        assert torch.equal(ops.add_rms_norm(x, residual, weight, EPS)[1], x + residual)  # as an unfused add

    @pytest.mark.parametrize("dtype", DTYPES)
    @pytest.mark.parametrize("tokens, heads, kv_heads, head_dim", [
        (1, 32, 32, 128), (13, 32, 8, 128), (16385, 64, 8, 128), (9, 16, 4, 256), (33, 4, 2, 64)])
    def test_rope(self, ops, tokens, heads, kv_heads, head_dim, dtype):
        check_rope(ops, tokens, heads, kv_heads, head_dim, dtype, "cuda")

    @pytest.mark.parametrize("dtype", DTYPES)
    @pytest.mark.parametrize("tokens, ffn", [(1, 11008), (19, 13696), (16385, 14336)])
    def test_silu_and_mul(self, ops, tokens, ffn, dtype):
        check_silu(ops, tokens, ffn, dtype, "cuda")

    def test_a_captured_graph_replays_every_op_on_new_inputs(self, ops):
        dtype, device = torch.bfloat16, "cuda"
        x, residual, weight = norm_case(5, 4096, dtype, device)
        q, k, angles = rope_case(5, 32, 8, 128, dtype, device)
        gate_up = gate_up_case(5, 11008, dtype, device)
        cos, sin = angles.cos().float(), angles.sin().float()

        def step():
            return (ops.rms_norm(x, weight, EPS), *ops.add_rms_norm(x, residual, weight, EPS),
                    *ops.rope_qk(q, k, cos, sin), ops.silu_and_mul(gate_up))

        torch.cuda.synchronize()
        step()  # compiled before the capture, as the engine's warm-up does
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs = step()
        new_x, new_residual, _ = norm_case(6, 4096, dtype, device)  # other seeds: other values
        new_q, new_k, new_angles = rope_case(6, 32, 8, 128, dtype, device)
        for static, new in ((x, new_x[:5]), (residual, new_residual[:5]), (q, new_q[:5]), (k, new_k[:5]),
                            (cos, new_angles[:5].cos()), (sin, new_angles[:5].sin()),
                            (gate_up, gate_up_case(6, 11008, dtype, device)[:5])):
            static.copy_(new)
        graph.replay()
        torch.cuda.synchronize()
        wants = (norm64(x, weight), norm64(outs[2], weight), x.double() + residual.double(),
                 rope64(q, new_angles[:5]), rope64(k, new_angles[:5]), silu_mul64(gate_up))
        for got, want in zip(outs, wants, strict=True):
            assert_close(got, want, dtype)

    def test_the_model_runs_the_kernels_and_says_so(self, ops):
        from attnbench.e2e import model

        x, residual, weight = norm_case(3, 256, torch.bfloat16, "cuda")
        model.add_rms_norm(x, residual, weight, EPS)
        assert model.add_rms_norm.kernel is ops.add_rms_norm and fused.status == fused.KERNELS, fused.status

    def test_a_tiny_e2e_run_under_full_graphs_matches_eager(self, tmp_path):
        reason = get_backend("vllm-fa2").unavailable_reason()
        if reason is not None:
            pytest.skip(f"vllm-fa2 unavailable: {reason}")
        df, agreement = cli_graph_run("vllm-fa2", "full", tmp_path)
        assert (df["fused_ops"] == fused.KERNELS).all() and (df["verdict"] == "pass").all(), df
        graph_vs_eager = agreement[agreement["run"] == agreement["reference"].str.replace("eager", "graph")]
        assert len(graph_vs_eager) and (graph_vs_eager["verdict"] == "match").all(), graph_vs_eager
