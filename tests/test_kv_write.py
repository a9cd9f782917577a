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
from conftest import rel_l2
from interpreter import interpreter_tests
from gpu_e2e import backend_params

from attnbench.e2e.attention import KV_WRITES, PagedAttention, kv_writer, rope_write_kv, write_kv
from attnbench.e2e.model import ModelArgs, apply_rope, random_model
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
    assert KV_WRITES == ("torch", "triton", "torch-rope", "triton-rope") and kv_writer("torch", "cpu") is write_kv
    assert kv_writer("torch-rope", "cpu") is rope_write_kv
    for triton in ("triton", "triton-rope"):
        with pytest.raises(UsageError, match=f"kv_write {triton}: a Triton kernel, it needs a CUDA device"):
            kv_writer(triton, "cpu")
    with pytest.raises(UsageError, match="kv_write: unknown 'fused'; choose from torch, triton, torch-rope, triton-rope"):
        kv_writer("fused", "cpu")
    point = SweepPoint(kind="decode", num_tokens=1, num_heads=2, head_dim=32, num_kv_heads=1, dtype="bfloat16")
    cache = torch.zeros(1, 2, BLOCK_SIZE, 1, 32, dtype=torch.bfloat16)
    assert PagedAttention(get_backend("reference"), "unified", point, cache, cache.clone()).kv_write == "torch"
    with pytest.raises(UsageError, match="needs a CUDA device"):
        ModelEngines(random_model(ModelArgs.from_name("tiny"), torch.bfloat16, "cpu"), 1, 32,
                     kv_write="triton").engine("reference", "unified")


def rope_case(tokens: int, kv_heads: int, head_dim: int, dtype: torch.dtype, device: str, seed: int = 0):
    """q, k, v as the model hands them over unturned (strided views of one qkv output), the tokens'
    float32 cos/sin at random positions, NaN caches and distinct slots."""
    k, v, k_cache, v_cache, slots = write_case(tokens, kv_heads, head_dim, dtype, device, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    q = torch.randn(tokens, 2 * kv_heads, head_dim, generator=gen).to(dtype).to(device)
    angles = torch.randint(0, 4096, (tokens, 1), generator=gen).float() * \
        (1.0 / 10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    return q, k, v, angles.cos().to(device), angles.sin().to(device), k_cache, v_cache, slots


def check_rope_write(rope_write, turn, tokens, kv_heads, head_dim, dtype, device):
    """rope_write against `turn` (a rope_qk) then the per-slot copy: q and the caches bit for bit."""
    q, k, v, cos, sin, k_cache, v_cache, slots = rope_case(tokens, kv_heads, head_dim, dtype, device)
    q_want, k_turned = turn(q, k, cos, sin)
    k_want, v_want = oracle(k_turned, v, k_cache, v_cache, slots)
    q_got = rope_write(q, k, v, cos, sin, k_cache, v_cache, slots)
    assert same(q_got, q_want) and same(k_cache, k_want) and same(v_cache, v_want)


def within_one_rounding(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype) -> bool:
    """Equal where want is NaN (untouched sentinels), else within one unit in the last place of
    dtype (and float32's own error) of want."""
    ulp = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10
    got, want = got.float(), want.float()
    nan = want.isnan()
    return bool(torch.equal(got.isnan(), nan)
                and ((got - want).abs()[~nan] <= ulp * want.abs()[~nan] + 1e-6).all())


def check_compiled_rope_write(rope_write, tokens, kv_heads, head_dim, dtype, device):
    """A compiled kernel may contract the rotation's multiply-adds (FMA) in another order than a
    second kernel or torch: q and the turned k within one rounding of the model's torch RoPE; v
    and every slot the step does not own bit for bit."""
    q, k, v, cos, sin, k_cache, v_cache, slots = rope_case(tokens, kv_heads, head_dim, dtype, device)
    k_want, v_want = oracle(apply_rope(k, cos, sin), v, k_cache, v_cache, slots)
    q_got = rope_write(q, k, v, cos, sin, k_cache, v_cache, slots)
    assert within_one_rounding(q_got, apply_rope(q, cos, sin), dtype)
    assert within_one_rounding(k_cache, k_want, dtype) and same(v_cache, v_want)


@pytest.mark.parametrize("tokens, kv_heads, head_dim", CASES[:2])
def test_the_torch_rope_write_turns_q_and_k_as_the_model_and_stores_them(tokens, kv_heads, head_dim):
    turn = lambda q, k, cos, sin: (apply_rope(q, cos, sin), apply_rope(k, cos, sin))  # noqa: E731
    check_rope_write(rope_write_kv, turn, tokens, kv_heads, head_dim, torch.bfloat16, "cpu")


def test_a_model_whose_attention_applies_rope_runs_as_the_one_whose_layers_do():
    """Eager on the CPU (the reference backend): the same ops in another place, so the same bits."""
    model = random_model(ModelArgs.from_name("tiny"), torch.bfloat16, "cpu")
    runs = {}
    for kv_write in ("torch", "torch-rope"):
        engine = ModelEngines(model, max_num_seqs=2, max_model_len=64, chunk_size=8, kv_write=kv_write).engine(
            "reference", "unified")
        assert engine.attn.applies_rope == (kv_write == "torch-rope")
        runs[kv_write] = engine.generate([[1, 2, 3, 4, 5], [7] * 11], 4, record_logits=True)
    assert runs["torch"].tokens == runs["torch-rope"].tokens
    assert torch.equal(runs["torch"].logits, runs["torch-rope"].logits)


def test_cos_and_sin_come_exactly_when_the_attention_applies_rope():
    point = SweepPoint(kind="decode", num_tokens=1, num_heads=2, head_dim=32, num_kv_heads=1, dtype="bfloat16")
    cache = torch.zeros(1, 2, BLOCK_SIZE, 1, 32, dtype=torch.bfloat16)
    q, k, cos = torch.zeros(1, 2, 32, dtype=torch.bfloat16), torch.zeros(1, 1, 32, dtype=torch.bfloat16), torch.ones(1, 16)
    plain = PagedAttention(get_backend("reference"), "unified", point, cache, cache.clone())
    turning = PagedAttention(get_backend("reference"), "unified", point, cache, cache.clone(), kv_write="torch-rope")
    with pytest.raises(ValueError, match="kv_write torch: RoPE's cos/sin must come without the call"):
        plain(0, q, k, k, rope=(cos, cos))
    with pytest.raises(ValueError, match="kv_write torch-rope: RoPE's cos/sin must come with the call"):
        turning(0, q, k, k)


# the kernel under Triton's interpreter, on CPU tensors

test_the_kernel_under_triton_s_interpreter_matches_the_per_slot_copy, interpreted, ops = interpreter_tests(__file__)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("tokens, kv_heads, head_dim", CASES)
def test_interpreted_write_matches_the_per_slot_copy(interpreted, tokens, kv_heads, head_dim, dtype):
    check_write(interpreted.write_kv, tokens, kv_heads, head_dim, dtype, "cpu")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("tokens, kv_heads, head_dim", CASES)
def test_interpreted_rope_write_is_the_rope_kernel_then_the_copy(interpreted, tokens, kv_heads, head_dim, dtype):
    """One launch against the two it replaces (the same float32 formula, the same rounding): bit for
    bit; and against the model's plain torch RoPE within one rounding of the output dtype."""
    check_rope_write(interpreted.rope_write_kv, interpreted.rope_qk, tokens, kv_heads, head_dim, dtype, "cpu")
    q, k, v, cos, sin, k_cache, v_cache, slots = rope_case(tokens, kv_heads, head_dim, dtype, "cpu")
    q_got = interpreted.rope_write_kv(q, k, v, cos, sin, k_cache, v_cache, slots)
    ulp = 2.0 ** -7 if dtype == torch.bfloat16 else 2.0 ** -10
    want = apply_rope(q, cos, sin).float()
    assert ((q_got.float() - want).abs() <= ulp * want.abs() + 1e-6).all()


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
    @pytest.mark.parametrize("cudagraph", [GraphMode.NONE, GraphMode.DECODE, GraphMode.FULL, GraphMode.PIECEWISE])
    def test_a_model_runs_the_same_whichever_write(self, backend, cudagraph):
        """The attention reads the same cache bytes either way, so tokens and logits are identical."""
        model = random_model(ModelArgs.from_name("tiny"), torch.bfloat16, "cuda")
        runs = {}
        for kv_write in KV_WRITES:
            engines = ModelEngines(model, max_num_seqs=2, max_model_len=64, chunk_size=8, kv_write=kv_write)
            engine = engines.engine(backend, "unified", cudagraph)
            runs[kv_write] = engine.generate([[1, 2, 3, 4, 5], [7] * 11], 6, record_logits=True)
        for same_bits in ("triton", "torch-rope"):  # the same cache bytes, the same q: the same tokens and logits
            assert runs["torch"].tokens == runs[same_bits].tokens
            assert torch.equal(runs["torch"].logits, runs[same_bits].logits)
        # triton-rope turns q and k in its own kernel: the same formula; its logits within bf16's error
        assert rel_l2(runs["triton-rope"].logits[:, 0], runs["torch"].logits[:, 0]) < 1e-2

    @pytest.mark.parametrize("tokens, kv_heads, head_dim", CASES + [(16, 32, 128), (8192, 8, 128)])
    def test_rope_write(self, ops, tokens, kv_heads, head_dim):
        check_compiled_rope_write(ops.rope_write_kv, tokens, kv_heads, head_dim, torch.bfloat16, "cuda")
