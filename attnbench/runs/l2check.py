"""Whether `--cold-l2` really starts each sample from a cold L2 on this GPU, and what the flush costs.

A cold row is only a flag until something shows the flush evicts what the kernel reads. This times
one decode attention kernel in rounds that alternate warm samples (the call before left its K/V in
L2) with cold ones (the flush buffer read just before each sample, between its own events), on two
batches: one whose K/V fits well inside L2, where cold must be slower than warm, and one many times
larger than L2, where nothing could stay in L2 and the two must agree. The per-round ratio cold /
warm is judged by its median's 95 % interval (order statistics, as e2e's stopping rule). The flush's
own time is kept out of the kernel's and reported beside it.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

import torch

from attnbench.e2e.stopping import median_interval
from attnbench.kernels.backends.registry import get_backend
from attnbench.kernels.inputs import make_inputs
from attnbench.kernels.metadata import build_metadata
from attnbench.kernels.timing import TimedKernel, l2_flush_buffer, sample_round
from attnbench.kernels.workload import SweepPoint

BACKENDS = ("vllm-fa2", "vllm-fa3", "flashinfer", "flex")  # the first that runs here does the check
HEADS, KV_HEADS, DIM, BLOCK = 32, 8, 128, 16
KV_BYTES_PER_TOKEN = 2 * KV_HEADS * DIM * 2  # K and V, bf16
FITS, EXCEEDS = 0.25, 16.0  # the two batches' K/V bytes, as shares of L2
SEQS = 8
ROUNDS, PER_ROUND = 15, 10
AGREE = 0.03  # "agree": the ratio's interval within 1 +- this


@dataclass(frozen=True)
class L2Point:
    """One batch timed warm and cold: its K/V bytes, medians, the ratio's median and interval, the
    flush's median, and what the ratio says."""

    name: str
    kv_mib: float
    warm_us: float
    cold_us: float
    ratio: float
    ratio_low: float
    ratio_high: float
    flush_us: float
    verdict: str


def decode_point(l2_bytes: int, share: float) -> SweepPoint:
    """A decode batch of SEQS sequences whose K/V is about `share` of L2."""
    context = max(BLOCK, round(share * l2_bytes / KV_BYTES_PER_TOKEN / SEQS / BLOCK) * BLOCK)
    return SweepPoint(kind="decode", num_tokens=SEQS, num_heads=HEADS, num_kv_heads=KV_HEADS, head_dim=DIM,
                      context=str(context), block_size=BLOCK)


def judge(name: str, ratios: list[float]) -> tuple[str, tuple[float, float]]:
    """`fits`: cold must be slower (interval above 1); `exceeds`: the two agree (interval within 1 +- AGREE)."""
    low, high = median_interval(ratios) or (min(ratios), max(ratios))
    if name == "fits":
        return ("flush evicts: cold slower" if low > 1.0 else "NOT SHOWN: cold not slower than warm"), (low, high)
    agree = 1 - AGREE <= low and high <= 1 + AGREE
    return ("agree, as they must" if agree else f"DIFFER by more than {AGREE:.0%}"), (low, high)


def time_point(name: str, point: SweepPoint, backend_name: str, device: torch.device) -> L2Point:
    """Rounds of PER_ROUND warm then PER_ROUND cold samples of one graph-replayed call."""
    inputs = make_inputs(point, device)
    plan = get_backend(backend_name).plan("unified", point, build_metadata("unified", inputs.batch,
                                                                         inputs.block_table).to(device))
    out = torch.empty_like(inputs.q)
    runner = TimedKernel(lambda: plan.run(inputs.q, inputs.k_cache, inputs.v_cache, out), "graph", device)
    flush = l2_flush_buffer(device)
    warm, cold, flushes, ratios = [], [], [], []
    for _ in range(ROUNDS):
        runner()  # this round's warm samples start from the call before
        w, _ = sample_round(runner, PER_ROUND, None)
        c, f = sample_round(runner, PER_ROUND, flush)
        warm, cold, flushes = warm + w, cold + c, flushes + f
        ratios.append(statistics.median(c) / statistics.median(w))
    verdict, (low, high) = judge(name, ratios)
    kv_mib = sum(inputs.batch.kv_lens) * KV_BYTES_PER_TOKEN / 2**20
    return L2Point(name, round(kv_mib, 1), statistics.median(warm) * 1e3, statistics.median(cold) * 1e3,
                   statistics.median(ratios), low, high, statistics.median(flushes) * 1e3, verdict)


def l2_check(device: torch.device, names: list[str]) -> dict | None:
    """The check on a CUDA device with the first of BACKENDS among `names` that runs here; None on the
    CPU or without one. A failure is said in the result, not raised: it is one line of a report."""
    if device.type != "cuda":
        return None
    backend = next((n for n in BACKENDS if n in names and not get_backend(n).unavailable_reason()), None)
    if backend is None:
        return None
    l2_bytes = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 0)
    result = {"backend": backend, "l2_mib": round(l2_bytes / 2**20, 1),
              "flush_mib": round(l2_flush_buffer(device).numel() / 2**20, 1), "points": []}
    try:
        for name, share in (("fits", FITS), ("exceeds", EXCEEDS)):
            result["points"].append(asdict(time_point(name, decode_point(l2_bytes, share), backend, device)))
    except Exception as exc:  # noqa: BLE001  one line of doctor's report, as a backend's failure is
        result["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
    return result


def l2_lines(result: dict | None) -> list[str]:
    """The check as report lines: each batch's warm and cold time, ratio with interval, the flush."""
    if result is None:
        return []
    head = (f"{'cold L2':<14} {result['backend']}, decode 8 seqs {HEADS}/{KV_HEADS}x{DIM}, graph replays; "
            f"L2 {result['l2_mib']} MiB, flush buffer {result['flush_mib']} MiB")
    lines = [head]
    for p in result["points"]:
        lines.append(f"{'':<14} K/V {p['kv_mib']} MiB ({p['name']} L2): warm {p['warm_us']:.1f} us, cold "
                     f"{p['cold_us']:.1f} us, cold / warm {p['ratio']:.3f} ({p['ratio_low']:.3f}-"
                     f"{p['ratio_high']:.3f}): {p['verdict']}; the flush {p['flush_us']:.1f} us, not in either")
    if "error" in result:
        lines.append(f"{'':<14} the check failed: {result['error']}")
    return lines


def l2_failed(result: dict | None) -> bool:
    """Whether the check ran and did not show what it must."""
    return result is not None and ("error" in result or any(
        p["verdict"].startswith(("NOT", "DIFFER")) for p in result["points"]))
