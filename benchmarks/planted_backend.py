"""Test-only backends with a planted regression of known size, for benchmarks/aa_check.py.

Each wraps a real backend and appends one launch to every plan: extra time on the device, of a
size given per row in the JSON file ATTNBENCH_PLANTED_TABLE ({planted_key(point, strategy): ms},
written by aa_check.py as a fraction of the row's measured median). On a GPU the extra launch is
`torch.cuda._sleep(cycles)`, a spin kernel on the stream (device time, captured in the row's CUDA
graph like the kernels it follows), with cycles per ms and the spin launch's own cost measured
once in a CUDA graph; on the CPU it is a busy-wait of the same length.

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
def spin_cost() -> tuple[float, float]:
    """(ms one empty spin launch takes inside a graph, spin cycles per ms), measured in CUDA graphs.

    The spin counts SM cycles, so it is measured after ~0.3 s of spinning has brought the clock up
    from idle (measured on an idle H200 first, it planted 7.5 % for 10 %); under a power cap the
    clock drops and the same cycles take longer, so a planted row gets at least its extra time."""
    for _ in range(12):
        torch.cuda._sleep(50_000_000)
    torch.cuda.synchronize()
    per_call = []
    for cycles in (0, 2_000_000):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(20):
                torch.cuda._sleep(cycles)
        graph.replay()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(5):
            graph.replay()
        end.record()
        torch.cuda.synchronize()
        per_call.append(start.elapsed_time(end) / 100)
    return per_call[0], 2_000_000 / (per_call[1] - per_call[0])


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
    description = "test only: vllm-fa2 plus a spin kernel of a planted extra device time (aa_check.py)"

    def spin(self, extra_ms: float):
        # the spin launch's own cost (~1 us in a graph) is not taken off: with it subtracted, the
        # H200 rows of 0.1 ms got 1.8 % for a planted 3 % (the cost overlaps the kernel before)
        _, cycles_per_ms = spin_cost()
        cycles = max(0, round(extra_ms * cycles_per_ms))

        def launch(q, k_cache, v_cache, out):
            torch.cuda._sleep(cycles)
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
