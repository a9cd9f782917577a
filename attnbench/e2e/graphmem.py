"""Capturing the e2e engine's CUDA graphs (decode, full and piecewise) into one pool per engine,
and how much device memory they hold: the segments of that private memory pool.

Why not the change in `torch.cuda.memory_reserved` around a capture: `torch.cuda.graph` empties the
allocator's cache on entry, and tensors freed between the two readings (the previous step's
activations) are released with it, so the difference can be negative (it was, for a tiny model's
full graphs). The allocator's snapshot names the pool that owns each segment; the
graphs' pool is what they keep for as long as they live. Static input and output buffers live in
the default pool and are not counted.

CapturedGraphs is what decode graphs (decode_graphs.py), full graphs (graphs.py) and piecewise
graphs (piecewise.py) share: one pool, its bytes, warm-up then capture, the seconds spent
capturing (a capture made inside a step is not its host time), and `load(step)`, by which the
engine hands them a step. GraphEngine is what they use of the engine, all of it public."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Callable, Protocol

import torch

from attnbench.e2e.attention import PagedAttention
from attnbench.e2e.model import Transformer
from attnbench.e2e.scheduler import KVCache, Step
from attnbench.errors import AttnbenchError


def pool_bytes(pool, device: torch.device | str) -> int:
    """Bytes of the segments `pool` (a CUDAGraph.pool() handle; None before any capture) owns on
    `device`."""
    if pool is None:
        return 0
    index = torch.device(device).index
    index = torch.cuda.current_device() if index is None else index
    want = tuple(pool)
    segments = torch.cuda.memory._snapshot()["segments"]
    return sum(int(s["total_size"]) for s in segments
               if s.get("device", index) == index and tuple(s.get("segment_pool_id", ())) == want)


def capture(fn: Callable[[], object], pool) -> tuple[torch.cuda.CUDAGraph, object]:
    """fn() captured into a new graph in `pool` (None: a new pool); the graph and the pool to pass to
    the next capture. Under a tensor-parallel process group the NCCL watchdog thread queries events
    while this thread captures; "thread_local" keeps its queries from invalidating the capture
    (pytorch#104555)."""
    mode = "thread_local" if torch.distributed.is_initialized() else "global"
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, pool, capture_error_mode=mode):
        fn()
    return graph, pool or graph.pool()


class GraphEngine(Protocol):
    """What an engine's graphs use of it (engine.Engine, which imports the graphs: they name this)."""

    model: Transformer
    cache: KVCache
    attn: PagedAttention
    device: torch.device
    cuda: bool
    max_num_seqs: int
    max_model_len: int
    token_budget: int  # tokens per step

    def upload(self, values: list[int], dtype: torch.dtype) -> torch.Tensor:
        """values on the device, through pinned memory, not waited for."""

    def copy_in(self, buffer: torch.Tensor, values: list[int]) -> None:
        """values into a static buffer (a prefix of one), not waited for."""

    def prepare_attention(self, step: Step) -> None:
        """The step's own metadata planned, and the plan bound with its slot mapping, for every layer."""


class CapturedGraphs(ABC):
    """Graphs an engine captures into one private pool. `emulate` (tests on the CPU, no CUDA
    graphs): a "replay" runs the captured function again."""

    def __init__(self, engine: GraphEngine, emulate: bool = False):
        if not engine.cuda and not emulate:
            raise AttnbenchError("CUDA graphs need a CUDA device")
        self.engine, self.emulate = engine, emulate
        self.pool = None
        self.mem_bytes = 0  # the pool's segments, after the last capture
        self.capture_s = 0.0  # seconds spent capturing, buffers and planning included

    @property
    @abstractmethod
    def num_graphs(self) -> int:
        """How many graphs are captured so far."""

    @abstractmethod
    def load(self, step: Step) -> Callable[[], torch.Tensor]:
        """The step's inputs into the buffers of the graphs that replay it; its launch, which
        returns the sampled rows' logits."""

    @abstractmethod
    def capture_every(self, max_tokens: int) -> None:
        """Capture now every graph a step of at most max_tokens tokens can need (none is left to first use)."""

    def capture_all(self, fns: list[Callable[[], object]]) -> list[Callable[[], object]]:
        """Each fn run once, in order (warm-up: lazy initialisation and compilation stay out of the
        graphs), then captured, in order, into this pool; their replays."""
        for fn in fns:
            fn()
        if self.emulate:
            return list(fns)
        replays = []
        for fn in fns:
            graph, self.pool = capture(fn, self.pool)
            replays.append(graph.replay)
        torch.cuda.synchronize(self.engine.device)
        self.mem_bytes = pool_bytes(self.pool, self.engine.device)
        return replays
