"""Run by tests/test_vllm_triton.py in a child process: vLLM's real unified_attention, from the pack
of scripts/device/prepare_triton.sh, under Triton's CPU interpreter, through attnbench's backend.

Why a child: TRITON_INTERPRET must be set before the kernel module is imported, and vllm.triton_utils
puts a placeholder in Triton's place when no GPU driver is active unless CUDA_VISIBLE_DEVICES is
empty; neither belongs in the test process. Prints one JSON line per (batch, strategy): the relative
L2 error against the float64 oracle of conftest, the path each part recorded, and which form ran,
read off the 3-D form's segment buffers (poisoned with NaN first: only the 3-D form writes them).
"""

from __future__ import annotations

import json
import sys

import torch
from conftest import naive_attention, page_kv, rel_l2

from attnbench.kernels.backends import vllm_triton
from attnbench.kernels.metadata import build_metadata
from attnbench.kernels.workload import Batch, SweepPoint

BATCHES = {"decode": Batch((1, 1), (20, 37), (True, True)), "mixed": Batch((1, 1, 5), (20, 37, 23), (True, True, False))}
CASES = (("decode", "unified"), ("mixed", "unified"), ("mixed", "split"))  # every form, each interpreted once


def main() -> None:
    library, reason = vllm_triton.find_library()
    assert library is not None, reason
    backend = vllm_triton.VllmTritonBackend(library)
    point = SweepPoint(kind="mixed", num_tokens=7, num_heads=2, num_kv_heads=1, head_dim=32, dtype="float16")
    allocate, ran = vllm_triton.segment_buffers, []

    def poisoned(point, device):  # the buffers each plan gets, remembered so the test can see which ones ran 3-D
        buffers = allocate(point, device)
        for name in ("softmax_segm_max", "softmax_segm_expsum"):
            buffers[name].fill_(float("nan"))
        ran.append(buffers)
        return buffers
    vllm_triton.segment_buffers = poisoned
    gen = torch.Generator().manual_seed(0)
    for kind, strategy in CASES:
        batch = BATCHES[kind]
        keys = [torch.randn(n, 1, 32, generator=gen, dtype=torch.float16) for n in batch.kv_lens]
        values = [torch.randn(n, 1, 32, generator=gen, dtype=torch.float16) for n in batch.kv_lens]
        k_cache, v_cache, table = page_kv(keys, values, 16, gen)
        q = torch.randn(batch.num_tokens, 2, 32, generator=gen, dtype=torch.float16)
        expected = naive_attention(q, keys, values, list(batch.query_lens), True, point.softmax_scale)
        ran.clear()
        plan = backend.plan(strategy, point, build_metadata(strategy, batch, table))
        out = plan.run(q, k_cache, v_cache, torch.full_like(q, float("nan")))
        forms = ["2d" if buffers["softmax_segm_max"].isnan().all() else "3d" for buffers in ran]
        print(json.dumps({"kind": kind, "strategy": strategy, "rel_l2": rel_l2(out, expected),
                          "details": plan.details, "forms": forms}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
