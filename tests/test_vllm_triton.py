"""vllm-triton: vLLM's unified Triton attention through attnbench's backend contract.

On the CPU: the path decision (2-D or 3-D, segments) against vLLM's rule worked by hand; the wiring
(unified and split slices, the decode rows' cu_seqlens_q, the segment buffers) through a stand-in
kernel that computes paged attention itself, checked against conftest's float64 oracle; the pack
builder on a small wheel of its own; and, where .device-triton/ was prepared, vLLM's real kernel
under Triton's CPU interpreter (tests/triton_interpret.py). On a GPU, test_gpu_kernels-style checks
run through `attnbench kernel` and `verify` (docs/kernels/vllm-triton.md gives the commands).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import torch
from conftest import naive_attention, page_kv, rel_l2

from attnbench.kernels.backends import vllm_triton
from attnbench.kernels.backends.registry import REGISTRY
from attnbench.kernels.metadata import build_metadata
from attnbench.kernels.workload import Batch, SweepPoint

ROOT = Path(__file__).resolve().parent.parent
PACK = ROOT / ".device-triton" / "vllm-triton-site.tar.xz"
POINT = SweepPoint(kind="mixed", num_tokens=7, num_heads=4, num_kv_heads=2, head_dim=32, dtype="float16")
MIXED = Batch((1, 1, 5), (20, 37, 23), (True, True, False))


@pytest.mark.parametrize("kv_heads, threshold", [(1, 128), (2, 64), (8, 16), (12, 8), (3, 40), (32, 4), (128, 1)])
def test_threshold_is_128_programs_snapped_to_a_default_capture_size(kv_heads, threshold):
    # 128 // kv_heads, then the nearest of 1, 2, 4, 8, 16, 24, ...: 128 // 12 = 10 -> 8, 128 // 3 = 42 -> 40
    assert vllm_triton.seq_threshold_3d(kv_heads) == threshold


@pytest.mark.parametrize("max_seqlen_q, num_seqs, invariant, expected", [
    (1, 16, False, ("3d", 16)), (1, 17, False, ("2d", 1)), (2, 1, False, ("2d", 1)), (1, 1, True, ("2d", 1))])
def test_the_3d_form_is_for_few_single_token_queries(max_seqlen_q, num_seqs, invariant, expected):
    assert vllm_triton.kernel_path(max_seqlen_q, num_seqs, 8, invariant) == expected


def stand_in_kernel(calls: list[dict]):
    """unified_attention's signature, computing paged varlen attention with conftest's oracle."""
    def unified_attention(q, k, v, out, cu_seqlens_q, seqused_k, block_table, causal, softmax_scale, **rest):
        calls.append({"tokens": q.shape[0], "cu_seqlens_q": cu_seqlens_q.tolist(), **rest})
        block = k.shape[1]
        keys, values = [], []
        for row, kv_len in enumerate(seqused_k.tolist()):
            pages = block_table[row, :(kv_len + block - 1) // block].long()
            keys.append(k[pages].flatten(0, 1)[:kv_len])
            values.append(v[pages].flatten(0, 1)[:kv_len])
        query_lens = torch.diff(cu_seqlens_q).tolist()
        out.copy_(naive_attention(q, keys, values, query_lens, causal, softmax_scale))
    return unified_attention


@pytest.mark.parametrize("strategy", ["unified", "split"])
def test_each_strategy_hands_the_kernel_its_slice_and_matches_the_oracle(strategy, cpu_generator):
    calls: list[dict] = []
    backend = vllm_triton.VllmTritonBackend(vllm_triton.TritonLibrary(stand_in_kernel(calls), "test", False))
    keys = [torch.randn(n, 2, 32, generator=cpu_generator) for n in MIXED.kv_lens]
    values = [torch.randn(n, 2, 32, generator=cpu_generator) for n in MIXED.kv_lens]
    k_cache, v_cache, table = page_kv(keys, values, 16, cpu_generator)
    q = torch.randn(MIXED.num_tokens, 4, 32, generator=cpu_generator)
    plan = backend.plan(strategy, POINT, build_metadata(strategy, MIXED, table))
    out = plan.run(q, k_cache, v_cache, torch.full_like(q, float("nan")))
    assert rel_l2(out, naive_attention(q, keys, values, list(MIXED.query_lens), True, POINT.softmax_scale)) < 1e-6
    segments = [(c["seq_threshold_3D"], c["num_par_softmax_segments"], tuple(c["softmax_segm_output"].shape))
                for c in calls]
    assert segments == [(64, 16, (64, 4, 16, 32))] * len(calls)  # 2 KV heads: 128 // 2, vLLM's shapes
    if strategy == "unified":
        assert [c["cu_seqlens_q"] for c in calls] == [[0, 1, 2, 7]]
        assert plan.details == {"triton_unified_path": "2d", "triton_unified_segments": 1}
        assert plan.decisions() == {"decision_triton_path": "2d", "decision_segments": "1"}
    else:
        assert [c["cu_seqlens_q"] for c in calls] == [[0, 1, 2], [0, 5]]
        assert plan.details == {"triton_decode_path": "3d", "triton_decode_segments": 16,
                                "triton_prefill_path": "2d", "triton_prefill_segments": 1}
        assert plan.decisions() == {"decision_triton_path": "decode=3d prefill=2d",
                                    "decision_segments": "decode=16 prefill=1"}


def test_registered_and_refused_with_reasons_where_it_cannot_run():
    backend = REGISTRY["vllm-triton"]
    assert backend.graph_safe and backend.graph_replay == "any" and backend.strategies == ("unified", "split")
    small = SweepPoint(kind="decode", num_tokens=4, num_heads=4, head_dim=16)
    assert "head dims >= 32" in backend.supports(small, "unified", torch.device("cuda"))
    if not torch.cuda.is_available():
        assert backend.unavailable_reason() == "needs a CUDA GPU (none visible)"


def fake_wheel(path: Path) -> Path:
    """A wheel holding every file the pack takes (one line each) and one it must leave out."""
    script = (ROOT / "scripts/device/prepare_triton.sh").read_text()
    files = script.split('FILES="', 1)[1].split('"', 1)[0].split()
    with zipfile.ZipFile(path, "w") as z:
        for name in files + ["vllm/_C.abi3.so", "vllm/platforms/cuda.py", "vllm/__init__.py"]:
            z.writestr(name, f"# {name}\n")
        z.writestr("vllm-0.24.0.dist-info/METADATA", "Name: vllm\nVersion: 0.24.0\n")
    return path


def test_the_pack_holds_the_listed_files_unmodified_a_stub_and_the_shim(tmp_path):
    wheel = fake_wheel(tmp_path / "vllm-0.24.0-cp38-abi3-manylinux_2_28_x86_64.whl")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    subprocess.run(["bash", str(ROOT / "scripts/device/prepare_triton.sh"), "--wheel", str(wheel), "--out",
                    str(tmp_path / "pack"), "--no-check"], env=env, check=True, capture_output=True)
    with tarfile.open(tmp_path / "pack" / "vllm-triton-site.tar.xz") as tar:
        names = {m.name.removeprefix("./") for m in tar.getmembers() if m.isfile()}
        text = {name: tar.extractfile("./" + name).read().decode() for name in names}
    assert "vllm/_C.abi3.so" not in names and "vllm/platforms/cuda.py" not in names
    assert text["vllm/v1/attention/ops/triton_unified_attention.py"] == "# vllm/v1/attention/ops/triton_unified_attention.py\n"
    assert "extend_path" in text["vllm/__init__.py"] and '__version__ = "0.24.0"' in text["vllm/__init__.py"]
    assert text["vllm/platforms/__init__.py"] == (ROOT / "scripts/device/vllm_platforms_shim.py").read_text()
    assert "vllm-0.24.0.dist-info/METADATA" in names and (tmp_path / "pack" / "bootstrap.sh").is_file()


@pytest.mark.skipif(not PACK.is_file(), reason="no .device-triton/ pack here: bash scripts/device/prepare_triton.sh")
def test_vllms_kernel_under_the_triton_interpreter_matches_the_oracle_and_its_recorded_path(tmp_path):
    with tarfile.open(PACK) as tar:
        tar.extractall(tmp_path / "site", filter="data")
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(tmp_path / "site")])}
    done = subprocess.run([sys.executable, str(ROOT / "tests/triton_interpret.py")], env=env, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["kind"], r["strategy"], r["forms"]) for r in rows] == [
        ("decode", "unified", ["3d"]), ("mixed", "unified", ["2d"]), ("mixed", "split", ["3d", "2d"])]
    for row in rows:
        assert row["rel_l2"] < 2e-3, row
        recorded = [v for k, v in row["details"].items() if k.endswith("_path")]  # in launch order
        assert recorded == row["forms"], row  # the recorded path is the form vLLM's code chose
