"""What a backend is: a named kernel family that runs the unified and split strategies.

A backend says whether it can run at all on this machine (`unavailable_reason`), whether it can
run a given point (`supports`), which library and version it really loaded (`library`), and
turns a point's inputs plus prepared metadata into a zero-argument callable. Only that callable
is timed; it writes into a preallocated output and returns it.
"""

from __future__ import annotations

from typing import Callable, Protocol

import torch

from attnbench.inputs import Inputs
from attnbench.metadata import KVCacheMetadata, SplitMetadata, VarlenMetadata
from attnbench.workload import SweepPoint

STRATEGIES = ("unified", "split")

Kernel = Callable[[], torch.Tensor]


class Backend(Protocol):
    name: str
    description: str

    def unavailable_reason(self) -> str | None:
        """None when the backend can run on this machine, else why not."""

    def library(self) -> tuple[str, str]:
        """(package that actually runs, its version)."""

    def supports(self, point: SweepPoint, strategy: str, device: torch.device) -> str | None:
        """None when this point can run, else the reason it can't."""

    def prepare(self, strategy: str, inputs: Inputs, metadata: VarlenMetadata | SplitMetadata,
                out: torch.Tensor) -> Kernel:
        """A callable computing attention for the whole batch into `out` (q's shape)."""


def strategy_kernel(q: torch.Tensor, out: torch.Tensor, metadata: VarlenMetadata | SplitMetadata,
                    varlen: Callable[[torch.Tensor, torch.Tensor, VarlenMetadata], Callable[[], object]],
                    kvcache: Callable[[torch.Tensor, torch.Tensor, KVCacheMetadata], Callable[[], object]]) -> Kernel:
    """The timed callable of a strategy, from a backend's two kernel calls.

    `varlen(q_part, out_part, md)` and `kvcache(q4, out4, md)` are called here, at prepare time, and
    return the zero-argument launch; so anything they precompute stays out of the timed path.
    Unified: one varlen launch over the batch. Split: the decode sequences (first in q, one query
    length) as a 4-D [seqs, query_len, heads, dim] view through kvcache, the rest through varlen.
    """
    if isinstance(metadata, VarlenMetadata):
        launches = [varlen(q, out, metadata)]
    else:
        launches = []
        dec, pre = metadata.decode, metadata.prefill
        if dec is not None:
            n_tok = dec.num_seqs * dec.query_len
            shape4 = (dec.num_seqs, dec.query_len, q.shape[1], q.shape[2])
            launches.append(kvcache(q[:n_tok].view(shape4), out[:n_tok].view(shape4), dec))
        if pre is not None:
            launches.append(varlen(q[pre.token_offset:], out[pre.token_offset:], pre))

    def run() -> torch.Tensor:
        for launch in launches:
            launch()
        return out
    return run
