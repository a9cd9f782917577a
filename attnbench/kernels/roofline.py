"""FLOPs, bytes and peaks: every unit conversion of attnbench lives here.

FLOPs count the two matmuls (QK^T and PV) over the (query, key) pairs a causal mask keeps:
4 * heads * head_dim per pair. Bytes count what a perfect kernel must move: the KV each sequence
attends to read once, q read once, out written once. Peaks come from vendors' datasheets (dense
bf16/fp16 tensor-core rate without sparsity, HBM bandwidth); a GPU not in the table gets none.
"""

from __future__ import annotations

import csv
import re
from importlib import resources

from attnbench.kernels.workload import Batch, SweepPoint

DTYPE_BYTES = {"bfloat16": 2, "float16": 2}
PLAUSIBLE_PCT = 110.0  # of a datasheet peak: boost clocks and rounding, not more
FROM_MEMORY_BYTES = 512e6  # more than any GPU's L2 holds: that many bytes come from HBM at least once


def _load_peaks() -> dict[str, tuple[float, float, str]]:
    """name substring -> (dense bf16 TFLOP/s, memory TB/s, source), from peaks.csv beside this file:
    datasheet figures are data, kept out of the code."""
    text = resources.files("attnbench.kernels").joinpath("peaks.csv").read_text()
    lines = [line for line in text.splitlines() if line and not line.startswith("#")]
    return {row["name"]: (float(row["tflops"]), float(row["tbps"]), row["source"]) for row in csv.DictReader(lines)}


PEAKS = _load_peaks()


def attended_pairs(query_len: int, kv_len: int, causal: bool) -> int:
    """(query, key) pairs one sequence computes; causal masks align bottom-right."""
    if not causal:
        return query_len * kv_len
    # query i (0-based) sees min(kv_len, kv_len - query_len + i + 1) keys, at least 0: summed in closed form
    seen = min(query_len, kv_len)  # the last `seen` queries see 1 .. kv_len keys; the others none
    return seen * (kv_len - seen) + seen * (seen + 1) // 2


def flops(point: SweepPoint, batch: Batch) -> float:
    pairs = sum(attended_pairs(q, kv, point.causal) for q, kv in zip(batch.query_lens, batch.kv_lens))
    return 4.0 * point.num_heads * point.head_dim * pairs


def min_bytes(point: SweepPoint, batch: Batch) -> float:
    elt = DTYPE_BYTES[point.dtype]
    kv = 2 * sum(batch.kv_lens) * point.num_kv_heads * point.head_dim
    q_and_out = 2 * batch.num_tokens * point.num_heads * point.head_dim
    return float((kv + q_and_out) * elt)


def peak_for(gpu_name: str) -> tuple[float, float, str] | None:
    """The table entry whose name appears as whole words in the GPU's name (longest first)."""
    for key in sorted(PEAKS, key=len, reverse=True):
        if re.search(rf"(?<![\w-]){re.escape(key)}(?![\w-])", gpu_name, re.IGNORECASE):
            return PEAKS[key]
    return None


def rates(point: SweepPoint, batch: Batch, median_ms: float, gpu_name: str | None) -> dict:
    """TFLOP/s, GB/s and % of the roofline bound (the faster of compute and memory floors)."""
    f, b = flops(point, batch), min_bytes(point, batch)
    seconds = median_ms / 1e3
    row = {"gflop": f / 1e9, "mbytes": b / 1e6,
           "tflops": f / seconds / 1e12 if seconds > 0 else None,
           "gbps": b / seconds / 1e9 if seconds > 0 else None,
           "pct_of_peak": None, "peak_source": ""}
    peak = peak_for(gpu_name) if gpu_name else None
    if peak and seconds > 0:
        tflops_peak, tbps_peak, source = peak
        floor_s = max(f / (tflops_peak * 1e12), b / (tbps_peak * 1e12))
        row["pct_of_peak"] = 100.0 * floor_s / seconds
        row["peak_source"] = source
    return row


def implausible(rates_row: dict, median_ms: float, gpu_name: str | None) -> str | None:
    """Why a timing cannot be of a call that did the work, or None: faster than the dense peak FLOP
    rate allows, or than peak bandwidth allows for bytes no L2 holds. `rates_row`: rates()'s cells
    for that median (its gflop and mbytes). A launch that did none of the work (FlashInfer 0.6.6's POD
    replayed from a CUDA graph: docs/kernels/flashinfer.md) times like that; it is a failed row, not a
    fast one."""
    peak = peak_for(gpu_name) if gpu_name else None
    if not peak or median_ms <= 0:
        return None
    tflops_peak, tbps_peak, source = peak
    seconds, f, b = median_ms / 1e3, rates_row["gflop"] * 1e9, rates_row["mbytes"] * 1e6
    compute_pct, memory_pct = 100 * f / (tflops_peak * 1e12) / seconds, 100 * b / (tbps_peak * 1e12) / seconds
    if compute_pct > PLAUSIBLE_PCT:
        return (f"implausible timing: {median_ms:.4g} ms is {compute_pct:.0f} % of the peak FLOP rate ({source}) for "
                f"{f / 1e9:.3g} GFLOP: the timed call did not do the work")
    if b > FROM_MEMORY_BYTES and memory_pct > PLAUSIBLE_PCT:
        return (f"implausible timing: {median_ms:.4g} ms is {memory_pct:.0f} % of the peak bandwidth ({source}) for "
                f"{b / 1e6:.0f} MB that must come from memory: the timed call did not do the work")
    return None
