"""The decision_* columns on the GPU's real libraries: FA2's derived splits, FA3's splits read from
the scheduler metadata its plan computed (as vLLM's builder does) and a graph replayed on another
batch after Plan.refresh recomputed that metadata; FlashInfer's resolved backend, tensor-core decode
and BatchAttention CTAs; the Triton kernel's grid. Each test skips with the reason when its library or GPU is missing."""

from __future__ import annotations

import pytest
import torch

from attnbench.kernels.backends.flashinfer import FlashInferBackend
from attnbench.kernels.backends.flashinfer_ba import FlashInferBABackend
from attnbench.kernels.backends.vllm_fa2 import VLLM_PACKAGE, VllmFA2Backend
from attnbench.kernels.backends.vllm_fa3 import VLLM_MAX_SPLITS, VllmFA3Backend
from attnbench.kernels.backends.vllm_triton import VllmTritonBackend
from attnbench.kernels.graphsafe import replay_check
from attnbench.kernels.inputs import make_inputs
from attnbench.kernels.metadata import build_metadata
from attnbench.kernels.workload import SweepPoint, build_batch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def available(backend):
    reason = backend.unavailable_reason()
    return pytest.param(backend, id=backend.name,
                        marks=pytest.mark.skipif(reason is not None, reason=f"{backend.name} unavailable: {reason}"))


FA3 = VllmFA3Backend()


def point(kind: str, num_tokens: int, context: str = "uniform:1000:8000") -> SweepPoint:
    return SweepPoint(kind=kind, num_tokens=num_tokens, num_heads=32, num_kv_heads=8, head_dim=128, dtype="bf16",
                      context=context, prefill_len=256)


def decisions(backend, kind: str, num_tokens: int, strategy: str) -> dict:
    inputs = make_inputs(point(kind, num_tokens), "cuda")
    plan = backend.plan(strategy, inputs.point, build_metadata(strategy, inputs.batch, inputs.block_table).to("cuda"))
    return plan.decisions()


@pytest.mark.parametrize("backend", [available(FA3)])
def test_fa3_small_decode_splits_under_vllm_s_cap_and_packs_gqa(backend):
    got = decisions(backend, "decode", 8, "unified")
    assert got["decision_max_splits"] == str(VLLM_MAX_SPLITS)
    assert 1 < int(got["decision_num_splits"]) <= VLLM_MAX_SPLITS  # 8 long sequences cannot fill 132 SMs
    assert got["decision_pack_gqa"] == "true"


@pytest.mark.parametrize("backend", [available(FA3)])
def test_fa3_past_vllm_s_graph_sizes_uses_its_own_heuristic(backend):
    got = decisions(backend, "prefill", 2048, "unified")
    assert got["decision_max_splits"] == "0" and got["decision_num_splits"].isdigit()


@pytest.mark.parametrize("backend", [available(FA3)])
@pytest.mark.parametrize("strategy", ["unified", "split"])
def test_fa3_graph_replays_another_batch_after_refresh(backend, strategy):
    capture = build_batch(point("decode", 16, "uniform:100:200"))
    longer = build_batch(point("decode", 16, "uniform:3000:6000"))
    results = replay_check(backend, strategy, point("decode", 16), capture, [longer], "safe", "cuda")
    assert [r["verdict"] for r in results] == ["pass", "pass"], results


@pytest.mark.parametrize("backend", [available(VllmFA2Backend())])
def test_fa2_records_the_splits_of_each_launch_of_vllm_s_build(backend):
    if backend.library()[0] != VLLM_PACKAGE:
        pytest.skip(f"FA2 here is {backend.library()[0]}, not vLLM's build whose heuristic the column follows")
    assert int(decisions(backend, "decode", 8, "unified")["decision_num_splits"]) > 1  # 8 x 8 tiles, long KV
    assert decisions(backend, "prefill", 512, "unified")["decision_num_splits"] == "1"  # paged varlen: unsplit


@pytest.mark.parametrize("backend", [available(FlashInferBackend())])
def test_flashinfer_names_its_backend_and_tensor_core_decode(backend):
    got = decisions(backend, "mixed", 256, "split")
    assert got["decision_tensor_cores"] == "true"
    assert set(got["decision_fi_backend"].replace("=", " ").split()) & {"fa2", "fa3"}


@pytest.mark.parametrize("backend", [available(FlashInferBABackend())])
def test_batch_attention_counts_its_ctas(backend):
    assert int(decisions(backend, "mixed", 256, "unified")["decision_ctas"]) > 0


@pytest.mark.parametrize("backend", [available(VllmTritonBackend())])
def test_triton_records_its_grid_per_launch(backend):
    """vLLM's rule: few one-token sequences take the 3-D grid (16 segments), a prefill the 2-D."""
    assert decisions(backend, "decode", 8, "unified") == {"decision_triton_path": "3d", "decision_segments": "16"}
    split = decisions(backend, "mixed", 256, "split")  # its decode rows 3-D if few enough, its prefill 2-D
    assert (split["decision_triton_path"], split["decision_segments"]) in {("2d", "1"), ("decode=3d prefill=2d",
                                                                                        "decode=16 prefill=1")}
