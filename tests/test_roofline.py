"""FLOPs, bytes and peaks against counts done by hand or by brute force."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from attnbench.kernels import roofline
from attnbench.kernels.workload import Batch, SweepPoint, build_batch

POINT = SweepPoint(kind="mixed", num_tokens=4, num_heads=4, num_kv_heads=2, head_dim=16)
# two decode tokens on 10 and 3 keys, one 2-token chunk on 5 keys
BATCH = Batch(query_lens=(1, 1, 2), kv_lens=(10, 3, 5), is_decode=(True, True, False))


def brute_force_pairs(query_len: int, kv_len: int, causal: bool) -> int:
    return sum(1 for i in range(query_len) for j in range(kv_len)
               if not causal or j <= kv_len - query_len + i)


@given(st.integers(1, 40), st.integers(1, 40), st.booleans())
def test_attended_pairs_counts_the_mask(query_len, kv_len, causal):
    assert roofline.attended_pairs(query_len, kv_len, causal) == brute_force_pairs(query_len, kv_len, causal)


def test_flops_of_a_tiny_batch():
    # causal pairs: 10 + 3 + (4 + 5) = 22; each pair is a dot product and an axpy of dim 16 per head
    assert roofline.flops(POINT, BATCH) == 22 * 4 * 4 * 16


def test_bytes_of_a_tiny_batch():
    kv = 2 * (10 + 3 + 5) * 2 * 16  # K and V, 2 kv heads
    q_and_out = 2 * 4 * 4 * 16  # 4 tokens x 4 heads
    assert roofline.min_bytes(POINT, BATCH) == (kv + q_and_out) * 2  # bf16


def test_rates_on_a_known_gpu():
    row = roofline.rates(POINT, BATCH, median_ms=0.01, gpu_name="NVIDIA H200")
    flops, nbytes = 22 * 4 * 4 * 16, (2 * 18 * 2 * 16 + 2 * 4 * 4 * 16) * 2
    assert row["tflops"] == pytest.approx(flops / 1e-5 / 1e12)
    assert row["gbps"] == pytest.approx(nbytes / 1e-5 / 1e9)
    # tiny batch: memory bound; the floor is bytes / 4.8 TB/s
    assert row["pct_of_peak"] == pytest.approx(100 * (nbytes / 4.8e12) / 1e-5)
    assert "H200" in row["peak_source"]


def test_rates_on_an_unknown_gpu_or_the_cpu_have_no_peak():
    for name in ("NVIDIA GeForce GTX 1080", None):
        row = roofline.rates(POINT, BATCH, median_ms=0.01, gpu_name=name)
        assert row["pct_of_peak"] is None and row["peak_source"] == ""
        assert row["tflops"] > 0


@pytest.mark.parametrize("name, source", [
    ("NVIDIA H100 80GB HBM3", "SXM5"), ("NVIDIA H100 PCIe", "PCIe"), ("NVIDIA L40S", "L40S"),
    ("NVIDIA A100-SXM4-80GB", "80GB"),
])
def test_peaks_are_found_by_the_device_name(name, source):
    assert source in roofline.peak_for(name)[2]


def test_a_gpu_not_in_the_table_gets_no_peak():
    assert roofline.peak_for("NVIDIA L40") is None


def test_a_timing_faster_than_the_hardware_is_implausible():
    """The H200's POD-under-graphs rows: 1000 mixed tokens of 32/8 x 128 at context 1024 (2.1 GB
    that must come from memory) in 0.0257 ms; split's 0.528 ms on the same point is plausible."""
    def implausible(point, ms, gpu):
        return roofline.implausible(roofline.rates(point, build_batch(point), ms, gpu), ms, gpu)
    point = SweepPoint("mixed", 1000, 32, 128, num_kv_heads=8, context="1024")
    why = implausible(point, 0.0257, "NVIDIA H200")
    assert why and "of the peak bandwidth" in why and "did not do the work" in why
    assert implausible(point, 0.528, "NVIDIA H200") is None
    assert implausible(point, 0.0257, "Some GPU") is None  # no peak to hold it to
    small = SweepPoint("decode", 10, 4, 64, context="256")  # 2.6 MB: an L2 can serve it faster than HBM
    assert implausible(small, 1e-4, "NVIDIA H200") is None
    dense = SweepPoint("prefill", 4096, 32, 128, context="1024")  # compute floor: no cache helps
    assert "peak FLOP rate" in implausible(dense, 1e-3, "NVIDIA H200")
