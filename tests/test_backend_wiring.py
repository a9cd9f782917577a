"""The kernel backends' plumbing on the CPU: which views, lengths and tables reach which launch.

The vllm-fa2 and vllm-fa3 backends are driven with fake libraries that compute each launch with
the float32 reference from exactly the arguments the backend passes. A wrong view, offset, length
or block table then gives a wrong output here, without a GPU (tests/test_gpu_kernels.py runs the
real kernels).
"""

from __future__ import annotations

import types

import pytest
import torch
from conftest import rel_l2

from attnbench.backends import vllm_fa2, vllm_fa3
from attnbench.backends.reference import reference_attention
from attnbench.inputs import make_inputs
from attnbench.metadata import build_metadata
from attnbench.workload import KINDS, SweepPoint


def lens_of(md):
    cu = md.cu_seqlens_q.tolist()
    return [b - a for a, b in zip(cu, cu[1:])], md.seqused_k.tolist()


def fake_varlen(q, k_cache, v_cache, out, md, causal, scale):
    out.copy_(reference_attention(q, k_cache, v_cache, *lens_of(md), md.block_table, causal, scale))


def fake_kvcache(q4, k_cache, v_cache, out4, cache_seqlens, block_table, causal, scale):
    b, s, h, d = q4.shape
    ref = reference_attention(q4.reshape(-1, h, d), k_cache, v_cache, [s] * b, cache_seqlens.tolist(),
                              block_table, causal, scale)
    out4.copy_(ref.view(b, s, h, d))


FAKE_FA2 = vllm_fa2.FA2Library("fake", "0", fake_varlen, fake_kvcache)


def fake_fa3_varlen(q, k, v, *, max_seqlen_q, cu_seqlens_q, max_seqlen_k, seqused_k, softmax_scale, causal,
                    block_table, out, fa_version):
    assert fa_version == 3 and max_seqlen_k == int(seqused_k.max())
    md = types.SimpleNamespace(cu_seqlens_q=cu_seqlens_q, seqused_k=seqused_k, block_table=block_table)
    fake_varlen(q, k, v, out, md, causal, softmax_scale)


def fake_fa3_fwd(*, q, k, v, out, seqused_k, page_table, max_seqlen_q, softmax_scale, is_causal, **_):
    assert q.dim() == 4 and q.shape[1] == max_seqlen_q  # the batched (kvcache) form
    fake_kvcache(q, k, v, out, seqused_k, page_table, is_causal, softmax_scale)


def named_kwargs(q4, k_cache, v_cache, out4, cache_seqlens, block_table, max_seqlen_q, max_seqlen_k, scale, causal):
    return dict(q=q4, k=k_cache, v=v_cache, out=out4, seqused_k=cache_seqlens, page_table=block_table,
                max_seqlen_q=max_seqlen_q, max_seqlen_k=max_seqlen_k, softmax_scale=scale, is_causal=causal)


@pytest.fixture
def fakes(monkeypatch):
    monkeypatch.setattr(vllm_fa2, "find_library", lambda: (FAKE_FA2, None))
    module = types.SimpleNamespace(flash_attn_varlen_func=fake_fa3_varlen)
    monkeypatch.setattr(vllm_fa3, "find_module", lambda: (module, None))
    monkeypatch.setattr(torch.ops, "_vllm_fa3_C", types.SimpleNamespace(fwd=fake_fa3_fwd), raising=False)
    monkeypatch.setattr(vllm_fa3, "batched_fwd_kwargs", named_kwargs)


@pytest.mark.parametrize("backend", [vllm_fa2.VllmFA2Backend(), vllm_fa3.VllmFA3Backend()], ids=["fa2", "fa3"])
@pytest.mark.parametrize("strategy", ["unified", "split"])
@pytest.mark.parametrize("kind", KINDS)
def test_every_token_reaches_the_right_launch(fakes, backend, strategy, kind):
    point = SweepPoint(kind=kind, num_tokens=13, num_heads=4, num_kv_heads=2, head_dim=64, dtype="bf16",
                       context="uniform:5:40", prefill_len=6, spec_k=3)
    inputs = make_inputs(point, "cpu")
    batch = inputs.batch
    ref = reference_attention(inputs.q, inputs.k_cache, inputs.v_cache, list(batch.query_lens),
                              list(batch.kv_lens), inputs.block_table, point.causal, inputs.softmax_scale)
    out = torch.full_like(inputs.q, float("nan"))
    metadata = build_metadata(strategy, batch, inputs.block_table)
    backend.prepare(strategy, inputs, metadata, out)()
    assert not torch.isnan(out).any()
    assert rel_l2(out, ref) < 1e-2  # bf16 rounding of the output only
