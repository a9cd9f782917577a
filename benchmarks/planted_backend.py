"""Test-only backends with a planted regression of known size, for benchmarks/aa_check.py and ab_check.py.

Each wraps a real backend and appends one launch to every plan: extra time on the device, of a
size given per row in the JSON file ATTNBENCH_PLANTED_TABLE ({planted_key(point, strategy): ms},
written by aa_check.py as a fraction of the row's measured median). On a GPU the extra launch is a
device-to-device copy sized to take that time (device time, not a host sleep; captured in the
row's CUDA graph like the kernels it follows), at a copy rate measured once in a CUDA graph. A copy
rather than a spin kernel (torch.cuda._sleep): see PlantedFA2.spin. On the CPU it is a busy-wait.

They are never in a normal run: only ATTNBENCH_EXTRA_BACKENDS="planted_backend:PlantedFA2" (with
benchmarks/ on PYTHONPATH) adds them to the registry. `planted_ms` in each plan's details (and in
--json rows) says what was planted.
"""

from __future__ import annotations

import functools
import json
import os
import time

import torch

from attnbench.kernels.backends.base import Plan
from attnbench.kernels.backends.reference import ReferenceBackend
from attnbench.kernels.backends.vllm_fa2 import VllmFA2Backend


def planted_key(point, strategy: str) -> str:
    return "|".join(str(v) for v in (point.kind, point.num_tokens, point.num_heads, point.num_kv_heads,
                                     point.head_dim, point.context, strategy))


@functools.lru_cache(maxsize=1)
def planted_table() -> dict:
    path = os.environ.get("ATTNBENCH_PLANTED_TABLE")
    if not path:
        raise RuntimeError("ATTNBENCH_PLANTED_TABLE is not set: a planted backend needs its table of extra times")
    with open(path) as f:
        return json.load(f)


@functools.lru_cache(maxsize=1)
def copy_rate() -> float:
    """Bytes a device-to-device copy moves per ms inside a CUDA graph (the slope between two sizes, so
    a launch's fixed cost is not counted), measured after ~0.3 s of copying has brought the clocks up."""
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    for _ in range(150):
        dst.copy_(src)
    times = []
    for size in (64 << 20, 512 << 20):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(10):
                dst[:size].copy_(src[:size])
        graph.replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 50)
    return ((512 << 20) - (64 << 20)) / (times[1] - times[0])


_COPY_BUFFERS: dict[str, torch.Tensor] = {}


def copy_buffers(nbytes: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Source and destination of at least nbytes, grown at plan time (never inside a launch)."""
    if _COPY_BUFFERS.get("src") is None or _COPY_BUFFERS["src"].numel() < nbytes:
        _COPY_BUFFERS.clear()
        size = max(nbytes, 1 << 20)
        _COPY_BUFFERS.update(src=torch.zeros(size, dtype=torch.uint8, device="cuda"),
                             dst=torch.empty(size, dtype=torch.uint8, device="cuda"))
    return _COPY_BUFFERS["src"], _COPY_BUFFERS["dst"]


class _Planted:
    oracle = False

    def extra_ms(self, point, strategy: str) -> float:
        key = planted_key(point, strategy)
        table = planted_table()
        if key not in table:
            raise RuntimeError(f"no planted time for {key} in {os.environ.get('ATTNBENCH_PLANTED_TABLE')}")
        return float(table[key])

    def plan(self, strategy, point, metadata):
        plan = super().plan(strategy, point, metadata)
        extra = self.extra_ms(point, strategy)
        return Plan(self.name, strategy, (*plan.launches, self.spin(extra)), {**plan.details, "planted_ms": extra})


class PlantedFA2(_Planted, VllmFA2Backend):
    name = "planted-fa2"
    description = "test only: vllm-fa2 plus a device copy of a planted extra device time (aa_check.py)"

    def spin(self, extra_ms: float):
        # extra HBM traffic, not an idle spin: torch.cuda._sleep keeps one thread busy while the card
        # idles, and on the power-capped H200 the kernels after it then ran at higher clocks, so a
        # planted 10 % arrived as 5.7-8 % (1.8-3.1 % for 3 %). A copy draws power and bandwidth as
        # the memory-bound attention kernels do, so the planted time stays planted.
        nbytes = max(0, round(extra_ms * copy_rate()))
        src, dst = copy_buffers(nbytes)
        src, dst = src[:nbytes], dst[:nbytes]

        def launch(q, k_cache, v_cache, out):
            dst.copy_(src)
        return launch


class PlantedReference(_Planted, ReferenceBackend):
    name = "planted-reference"
    description = "test only: the reference plus a busy-wait of a planted extra time (aa_check.py on the CPU)"

    def spin(self, extra_ms: float):
        def launch(q, k_cache, v_cache, out):
            end = time.perf_counter() + extra_ms / 1e3
            while time.perf_counter() < end:
                pass
        return launch


class AbPlantedFA2(PlantedFA2):
    """PlantedFA2 under vllm-fa2's own name, for `attnbench ab` (benchmarks/ab_check.py): loaded on
    the candidate side only, it replaces vllm-fa2 there, so the two sides' rows match."""

    name = "vllm-fa2"


class AbPlantedReference(PlantedReference):
    """PlantedReference under the reference's name: ab_check.py's pipeline on the CPU."""

    name = "reference"
    oracle = True  # as the reference it replaces: a CPU sweep's default backend
