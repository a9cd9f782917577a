"""The float32 reference against an independent float64 oracle, its backend, and the verdict check."""

from __future__ import annotations

import pytest
import torch
from conftest import naive_attention, page_kv, rel_l2

from attnbench.kernels.backends.reference import ReferenceBackend, reference_attention
from attnbench.kernels.inputs import make_inputs
from attnbench.kernels.metadata import build_metadata
from attnbench.kernels.check import REL_L2_TOLERANCE as TOLERANCE
from attnbench.kernels.check import check_output, check_twice
from attnbench.kernels.workload import KINDS, SweepPoint

# (heads, kv heads, dim, block size, causal, query lens, kv lens)
CASES = {
    "gqa2-decode-and-prefix": (4, 2, 32, 16, True, (1, 1, 6, 12), (17, 64, 6, 40)),
    "mqa-prefix": (4, 1, 16, 16, True, (3, 9), (50, 33)),
    "mha-noncausal": (4, 4, 16, 16, False, (2, 5, 1), (31, 5, 16)),
    "gqa2-block32-ragged": (4, 2, 32, 32, True, (4, 7, 1), (45, 7, 33)),
    "mqa-block32-noncausal": (4, 1, 32, 32, False, (8, 8), (8, 63)),
    "prefill-only": (4, 2, 16, 16, True, (20, 20), (20, 20)),
}


def random_case(heads, kv_heads, dim, query_lens, kv_lens, gen):
    q = torch.randn(sum(query_lens), heads, dim, generator=gen)
    keys = [torch.randn(kv, kv_heads, dim, generator=gen) for kv in kv_lens]
    values = [torch.randn(kv, kv_heads, dim, generator=gen) for kv in kv_lens]
    return q, keys, values


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_reference_matches_float64_naive_attention(case, cpu_generator):
    heads, kv_heads, dim, block_size, causal, query_lens, kv_lens = case
    q, keys, values = random_case(heads, kv_heads, dim, query_lens, kv_lens, cpu_generator)
    k_cache, v_cache, block_table = page_kv(keys, values, block_size, cpu_generator)
    scale = dim ** -0.5

    out = reference_attention(q, k_cache, v_cache, list(query_lens), list(kv_lens), block_table, causal, scale)

    assert out.dtype == torch.float32
    assert rel_l2(out, naive_attention(q, keys, values, list(query_lens), causal, scale)) < 1e-5


def test_causal_window_is_aligned_bottom_right():
    """With q = 0 every visible key weighs the same, so each output is the mean of the visible V."""
    q_len, kv_len = 3, 5
    values = torch.arange(kv_len, dtype=torch.float32).view(kv_len, 1, 1).expand(kv_len, 1, 16).contiguous()
    keys = torch.randn(kv_len, 1, 16)
    q = torch.zeros(q_len, 2, 16)
    # query i sees keys 0 .. kv_len - q_len + i: 0..2, 0..3, 0..4
    expected = torch.tensor([1.0, 1.5, 2.0]).view(q_len, 1, 1).expand(q_len, 2, 16)

    naive = naive_attention(q, [keys], [values], [q_len], causal=True, scale=1.0)
    k_cache, v_cache, table = page_kv([keys], [values], 16, torch.Generator().manual_seed(0))
    ref = reference_attention(q, k_cache, v_cache, [q_len], [kv_len], table, causal=True, softmax_scale=1.0)

    torch.testing.assert_close(naive, expected.double())
    torch.testing.assert_close(ref, expected)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("strategy", ["unified", "split"])
def test_reference_backend_strategies_match_the_oracle(kind, strategy):
    point = SweepPoint(kind=kind, num_tokens=24, num_heads=4, num_kv_heads=2, head_dim=16,
                       context="uniform:1:48", prefill_len=16, spec_k=3, block_size=16)
    inputs = make_inputs(point, "cpu")
    batch = inputs.batch
    out = torch.full_like(inputs.q, float("nan"))  # poison: every token must be written

    plan = ReferenceBackend().plan(strategy, point, build_metadata(strategy, batch, inputs.block_table))
    plan.run(inputs.q, inputs.k_cache, inputs.v_cache, out)

    expected = reference_attention(inputs.q, inputs.k_cache, inputs.v_cache, list(batch.query_lens),
                                   list(batch.kv_lens), inputs.block_table, point.causal, point.softmax_scale)
    torch.testing.assert_close(out.float(), expected, rtol=1e-2, atol=1e-2)  # out is bf16
    keys = [_gather(inputs.k_cache, inputs.block_table[i], kv) for i, kv in enumerate(batch.kv_lens)]
    values = [_gather(inputs.v_cache, inputs.block_table[i], kv) for i, kv in enumerate(batch.kv_lens)]
    naive = naive_attention(inputs.q, keys, values, list(batch.query_lens), point.causal, point.softmax_scale)
    assert rel_l2(expected, naive) < 1e-5
    assert rel_l2(out, naive) < TOLERANCE["bfloat16"]


def _gather(cache: torch.Tensor, row: torch.Tensor, kv_len: int) -> torch.Tensor:
    """One sequence's keys, token by token through its block table row."""
    block_size = cache.shape[1]
    return torch.stack([cache[int(row[t // block_size]), t % block_size] for t in range(kv_len)])


# -- the verdict ---------------------------------------------------------------------------------

def test_check_passes_an_exact_output():
    ref = torch.randn(10, 4, 16)
    check = check_output(ref.to(torch.bfloat16), ref, "bfloat16")
    assert check["verdict"] == "pass" and check["reason"] == ""
    assert check["rel_l2_error"] < 1e-2 and check["tolerance"] == TOLERANCE["bfloat16"]


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_check_fails_an_output_off_by_more_than_the_tolerance(dtype):
    ref = torch.randn(10, 4, 16, dtype=torch.float64)
    noise = torch.randn(ref.shape, dtype=torch.float64)
    tol = TOLERANCE[dtype]
    near = ref + noise * (0.5 * tol * ref.norm() / noise.norm())
    far = ref + noise * (2.0 * tol * ref.norm() / noise.norm())

    assert check_output(near.float(), ref.float(), dtype)["verdict"] == "pass"
    check = check_output(far.float(), ref.float(), dtype)
    assert check["verdict"] == "fail"
    assert check["rel_l2_error"] == pytest.approx(2.0 * tol, rel=1e-3)
    assert f"> {tol:g}" in check["reason"]


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_check_fails_any_non_finite_element(bad):
    ref = torch.randn(10, 4, 16)
    out = ref.clone()
    out[3, 1, 7] = bad
    check = check_output(out, ref, "bfloat16")
    assert check["verdict"] == "fail"
    assert "NaN/inf" in check["reason"]


def test_a_launch_that_works_only_once_fails_its_check():
    """FlashInfer 0.6.6's POD replayed from a CUDA graph: the first run wrote the output, later runs
    wrote nothing. One poisoned check would have passed; the second poisoned run catches it."""
    ref = torch.randn(8, 4, 16)
    out = torch.empty_like(ref)
    runs = []

    def once():
        if not runs:
            out.copy_(ref)
        runs.append(1)
    check = check_twice(once, out, ref, "bfloat16")
    assert check["verdict"] == "fail" and check["reason"].startswith("on a second run: output has NaN/inf")
    assert check_twice(lambda: out.copy_(ref), out, ref, "bfloat16")["verdict"] == "pass"


def test_a_backend_declaring_fused_without_a_fused_launch_is_refused_when_defined():
    from attnbench.kernels.backends.reference import ReferenceBackend

    with pytest.raises(TypeError, match="fused"):
        type("NoFused", (ReferenceBackend,), {"strategies": ("unified", "split", "fused")})
