"""The paged K/V write: fused_ops.write_kv (one Triton launch for K and V) against a plain per-slot
copy written here, and the kv_write choice that picks it (attnbench/e2e/attention.py).

A copy has no rounding: the kernel's caches must equal the oracle's bit for bit, and every slot the
step does not own must keep its sentinel (NaN). Three groups, as in test_fused_ops.py: the choice's
refusals on the CPU (always); the kernel under Triton's interpreter on CPU tensors (skipped where
triton does not import, as in CI); on a GPU, the kernel eager and replayed from a CUDA graph on new
inputs, and a tiny model whose tokens and logits are the same whichever write it runs.
"""

from __future__ import annotations


import pytest
import torch
from interpreter import interpreter_tests
from gpu_e2e import backend_params

from attnbench.e2e.attention import KV_WRITES, PagedAttention, kv_writer, write_kv
from attnbench.e2e.model import ModelArgs, random_model
from attnbench.e2e.modes import GraphMode
from attnbench.e2e.runner import ModelEngines
from attnbench.errors import UsageError
from attnbench.kernels.backends.registry import get_backend
from attnbench.kernels.workload import SweepPoint

BLOCK_SIZE = 16
CASES = [  # tokens, kv_heads, head_dim: one decode token; a chunk; head dim not a power of two;
    (1, 8, 128), (21, 2, 64), (3, 1, 96), (4, 40, 128)]  # 40 x 128 > one program's block: two head blocks


def write_case(tokens: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: str, seed: int = 0):
    """k and v as the model hands them over (strided views of one qkv output), NaN caches, and
    distinct random slots over several blocks."""
    gen = torch.Generator().manual_seed(seed)
    q_heads = 2 * kv_heads
    qkv = torch.randn(tokens, (q_heads + 2 * kv_heads) * head_dim, generator=gen).to(dtype).to(device)
    _, k, v = qkv.split([q_heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1)
    blocks = tokens // BLOCK_SIZE + 3
    shape = (blocks, BLOCK_SIZE, kv_heads, head_dim)
    k_cache = torch.full(shape, float("nan"), dtype=dtype, device=device)
    v_cache = torch.full(shape, float("nan"), dtype=dtype, device=device)
    slots = torch.randperm(blocks * BLOCK_SIZE, generator=gen)[:tokens].to(device)
    return k.view(tokens, kv_heads, head_dim), v.view(tokens, kv_heads, head_dim), k_cache, v_cache, slots


def oracle(k, v, k_cache, v_cache, slots):
    """Slot s is block s // block_size, offset s % block_size: copied one token at a time."""
    k_want, v_want = k_cache.clone(), v_cache.clone()
    for i, slot in enumerate(slots.tolist()):
        k_want[slot // BLOCK_SIZE, slot % BLOCK_SIZE] = k[i]
        v_want[slot // BLOCK_SIZE, slot % BLOCK_SIZE] = v[i]
    return k_want, v_want


def same(got: torch.Tensor, want: torch.Tensor) -> bool:
    """Equal bit for bit, NaN sentinels included."""
    return torch.equal(got.view(torch.int16), want.view(torch.int16))


def check_write(write, tokens, kv_heads, head_dim, dtype, device):
    k, v, k_cache, v_cache, slots = write_case(tokens, kv_heads, head_dim, dtype, device)
    assert tokens == 1 or k.stride(0) == v.stride(0) > kv_heads * head_dim  # rows of the qkv output, not packed
    k_want, v_want = oracle(k, v, k_cache, v_cache, slots)
    write(k_cache, v_cache, k, v, slots)
    assert same(k_cache, k_want) and same(v_cache, v_want)


# the choice, on the CPU

@pytest.mark.parametrize("tokens, kv_heads, head_dim", CASES[:2])
def test_the_torch_write_matches_the_per_slot_copy(tokens, kv_heads, head_dim):
    check_write(write_kv, tokens, kv_heads, head_dim, torch.bfloat16, "cpu")


def test_torch_is_the_default_and_triton_is_refused_off_cuda():
    assert KV_WRITES == ("torch", "triton") and kv_writer("torch", "cpu") is write_kv
    with pytest.raises(UsageError, match="kv_write triton: a Triton kernel, it needs a CUDA device"):
        kv_writer("triton", "cpu")
    with pytest.raises(UsageError, match="kv_write: unknown 'fused'; choose from torch, triton"):
        kv_writer("fused", "cpu")
    point = SweepPoint(kind="decode", num_tokens=1, num_heads=2, head_dim=32, num_kv_heads=1, dtype="bfloat16")
    cache = torch.zeros(1, 2, BLOCK_SIZE, 1, 32, dtype=torch.bfloat16)
    assert PagedAttention(get_backend("reference"), "unified", point, cache, cache.clone()).kv_write == "torch"
    with pytest.raises(UsageError, match="needs a CUDA device"):
        ModelEngines(random_model(ModelArgs.from_name("tiny"), torch.bfloat16, "cpu"), 1, 32,
                     kv_write="triton").engine("reference", "unified")


# the kernel under Triton's interpreter, on CPU tensors

test_the_kernel_under_triton_s_interpreter_matches_the_per_slot_copy, interpreted, ops = interpreter_tests(__file__)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("tokens, kv_heads, head_dim", CASES)
def test_interpreted_write_matches_the_per_slot_copy(interpreted, tokens, kv_heads, head_dim, dtype):
    check_write(interpreted.write_kv, tokens, kv_heads, head_dim, dtype, "cpu")


def test_interpreted_write_refuses_caches_of_other_strides_or_dtypes(interpreted):
    k, v, k_cache, _, slots = write_case(2, 2, 64, torch.bfloat16, "cpu")
    v_cache = torch.zeros(k_cache.shape[:-1] + (128,), dtype=torch.bfloat16)[..., :64]
    with pytest.raises(ValueError, match="the caches' strides differ"):
        interpreted.write_kv(k_cache, v_cache, k, v, slots)
    with pytest.raises(ValueError, match="must share a dtype"):
        interpreted.write_kv(k_cache, k_cache.half(), k, v, slots)


# the kernel on a GPU

@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
class TestOnCuda:
    @pytest.mark.parametrize("tokens, kv_heads, head_dim", CASES + [(8192, 8, 128)])
    def test_write(self, ops, tokens, kv_heads, head_dim):
        check_write(ops.write_kv, tokens, kv_heads, head_dim, torch.bfloat16, "cuda")

    def test_write_replayed_from_a_graph_on_new_inputs(self, ops):
        k, v, k_cache, v_cache, slots = write_case(5, 8, 128, torch.bfloat16, "cuda")
        ops.write_kv(k_cache, v_cache, k, v, slots)  # compiles outside the capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            ops.write_kv(k_cache, v_cache, k, v, slots)
        k2, v2, _, _, slots2 = write_case(5, 8, 128, torch.bfloat16, "cuda", seed=1)
        k.copy_(k2), v.copy_(v2), slots.copy_(slots2)
        k_want, v_want = oracle(k, v, k_cache, v_cache, slots)
        graph.replay()
        torch.cuda.synchronize()
        assert same(k_cache, k_want) and same(v_cache, v_want)

    @pytest.mark.parametrize("backend", backend_params("vllm-fa2", "vllm-fa3"))
    @pytest.mark.parametrize("cudagraph", [GraphMode.NONE, GraphMode.DECODE, GraphMode.FULL])
    def test_a_model_runs_the_same_whichever_write(self, backend, cudagraph):
        """The attention reads the same cache bytes either way, so tokens and logits are identical."""
        model = random_model(ModelArgs.from_name("tiny"), torch.bfloat16, "cuda")
        runs = {}
        for kv_write in KV_WRITES:
            engines = ModelEngines(model, max_num_seqs=2, max_model_len=64, chunk_size=8, kv_write=kv_write)
            engine = engines.engine(backend, "unified", cudagraph)
            runs[kv_write] = engine.generate([[1, 2, 3, 4, 5], [7] * 11], 6, record_logits=True)
        assert runs["torch"].tokens == runs["triton"].tokens
        assert torch.equal(runs["torch"].logits, runs["triton"].logits)
