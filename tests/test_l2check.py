"""The cold-L2 proof (runs/l2check.py) and the flush's own time kept out of a cold row's samples."""

from __future__ import annotations

import pytest
import torch

from attnbench.kernels.timing import TimedKernel, TimingConfig, sample_round, time_kernels
from attnbench.kernels.workload import build_batch
from attnbench.runs.l2check import (
    EXCEEDS,
    FITS,
    KV_BYTES_PER_TOKEN,
    decode_point,
    judge,
    l2_check,
    l2_failed,
    l2_lines,
)

H200_L2 = 60 * 2**20


@pytest.mark.parametrize("share", [FITS, EXCEEDS])
def test_decode_point_holds_the_share_of_l2_it_is_named_for(share):
    point = decode_point(H200_L2, share)
    kv_bytes = sum(build_batch(point).kv_lens) * KV_BYTES_PER_TOKEN
    assert abs(kv_bytes / H200_L2 - share) / share < 0.05
    assert point.kind == "decode" and point.num_tokens == 8


def test_a_fitting_batch_must_run_slower_cold():
    assert judge("fits", [1.2, 1.25, 1.3, 1.22, 1.28, 1.21, 1.27])[0].startswith("flush evicts")
    verdict, (low, high) = judge("fits", [0.98, 1.01, 1.0, 0.99, 1.02, 1.0, 0.97])
    assert verdict.startswith("NOT SHOWN") and low <= 1.0 <= high


def test_a_batch_larger_than_l2_must_time_alike_warm_and_cold():
    assert judge("exceeds", [0.99, 1.0, 1.01, 1.0, 0.995, 1.005, 1.0])[0].startswith("agree")
    assert judge("exceeds", [1.08, 1.1, 1.09, 1.12, 1.07, 1.11, 1.1])[0].startswith("DIFFER")


def result_with(verdicts: list[str], error: str | None = None) -> dict:
    points = [{"name": n, "kv_mib": 15.0, "warm_us": 10.0, "cold_us": 13.0, "ratio": 1.3, "ratio_low": 1.2,
               "ratio_high": 1.4, "flush_us": 40.0, "verdict": v} for n, v in zip(("fits", "exceeds"), verdicts)]
    return {"backend": "vllm-fa2", "l2_mib": 60.0, "flush_mib": 120.0, "points": points,
            **({"error": error} if error else {})}


def test_the_report_fails_only_when_the_check_ran_and_did_not_show_it():
    assert not l2_failed(None)  # not run (the CPU): nothing wrong
    assert not l2_failed(result_with(["flush evicts: cold slower", "agree, as they must"]))
    assert l2_failed(result_with(["NOT SHOWN: cold not slower than warm", "agree, as they must"]))
    assert l2_failed(result_with(["flush evicts: cold slower", "DIFFER by more than 3%"]))
    assert l2_failed(result_with([], error="RuntimeError: out of memory"))


def test_the_lines_say_both_times_the_ratio_and_the_flush():
    lines = l2_lines(result_with(["flush evicts: cold slower", "agree, as they must"]))
    assert lines[0].startswith("cold L2") and "L2 60.0 MiB" in lines[0]
    assert "warm 10.0 us, cold 13.0 us, cold / warm 1.300 (1.200-1.400)" in lines[1]
    assert "the flush 40.0 us, not in either" in lines[1]
    assert l2_lines(None) == []
    assert "the check failed: boom" in l2_lines(result_with([], error="boom"))[-1]


def test_nothing_to_check_on_the_cpu():
    assert l2_check(torch.device("cpu"), ["reference"]) is None


def test_a_cpu_sample_has_no_flush():
    runner = TimedKernel(lambda: torch.ones(4) * 2, "eager", torch.device("cpu"))
    samples, flushes = sample_round(runner, 3, None)
    assert len(samples) == 3 and flushes == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_the_gpu_cold_samples_carry_their_flush_apart():
    device = torch.device("cuda")
    x = torch.randn(2**20, device=device)
    runner = TimedKernel(lambda: x.sum(), "graph", device)
    cold, warm = (time_kernels([runner], TimingConfig(mode="graph", cold_l2=c, warmup_ms=1.0, budget_ms=20.0,
                                                       min_samples=10))[0] for c in (True, False))
    assert len(cold.flush_ms) == cold.n and min(cold.flush_ms) > 0
    assert warm.flush_ms == []


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_the_gpu_the_flush_evicts_and_a_large_batch_times_alike():
    from attnbench.kernels.backends.registry import REGISTRY

    result = l2_check(torch.device("cuda"), list(REGISTRY))
    if result is None:
        pytest.skip("no FA2, FA3, FlashInfer or flex backend runs here")
    assert "error" not in result, result
    verdicts = {p["name"]: p["verdict"] for p in result["points"]}
    assert verdicts["fits"].startswith("flush evicts"), result
    assert all(p["flush_us"] > 0 for p in result["points"])
