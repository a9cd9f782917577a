"""A mixed batch's two parts, each timed alone: when fusion (POD) has a chance.

A fused launch runs a batch's prefill part and decode part concurrently, so it can only win where
the two take comparable time: with one part many times the other, the long one is the whole cost
however well the short one hides. So for every point whose batch has both parts, the sweep times
split's two launches alone, in the row's own mode (eager or a CUDA graph), timer and L2 state,
and records `prefill_part_ms` and `decode_part_ms` on the split row and on the fused row (the
parts it overlaps). Their ratio says how balanced the point is; their sum against split's own
time, what split pays for two launches beside each other.

They are timed after the rows' own timing, in the last replicate only, so the rows' samples and
their interleaving stay as they were. Cheaper than a row: the two parts interleaved with each
other, a quarter of the row's budget, at most 100 samples; each column holds a part's median.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

import torch

from attnbench.kernels.backends.base import Plan
from attnbench.kernels.metadata import SplitMetadata
from attnbench.kernels.timing import TimingConfig, estimate_call_ms, make_timed_kernel, time_kernels

PART_BUDGET_SHARE = 0.25  # of the row's --budget-ms
PART_MAX_SAMPLES = 100


def split_parts(plan: Plan, metadata) -> dict[str, Plan]:
    """The split plan's two launches as plans of their own, {"prefill": ..., "decode": ...}; {} for a
    plan of another strategy, a batch with one part only, or a split plan that is not two launches
    (its parts cannot be told apart: the columns stay empty). A split plan of a two-part batch is
    (decode launch, prefill launch), in base.Backend.plan's order."""
    if plan.strategy != "split" or not isinstance(metadata, SplitMetadata) or None in (metadata.decode,
                                                                                       metadata.prefill):
        return {}
    if len(plan.launches) != 2:
        return {}
    decode, prefill = plan.launches
    return {"prefill": replace(plan, launches=(prefill,)), "decode": replace(plan, launches=(decode,))}


def part_config(cfg: TimingConfig) -> TimingConfig:
    """The row's timing (mode, L2, sample length, stopping spread) with a smaller sampling budget."""
    return replace(cfg, budget_ms=cfg.budget_ms * PART_BUDGET_SHARE, max_samples=min(cfg.max_samples, PART_MAX_SAMPLES))


def time_parts(parts: dict[str, Callable[[], torch.Tensor]], mode: str, device: torch.device,
               cfg: TimingConfig) -> dict[str, float]:
    """{"prefill_part_ms": ..., "decode_part_ms": ...}: each part's median, the parts timed interleaved."""
    cfg = part_config(replace(cfg, mode=mode))
    names = list(parts)
    runners = [make_timed_kernel(parts[name], mode, device, cfg,
                                 estimate_call_ms(parts[name], device) if mode == "eager" else 0.0)
               for name in names]
    timings = time_kernels(runners, cfg)
    return {f"{name}_part_ms": timing.median_ms for name, timing in zip(names, timings)}
