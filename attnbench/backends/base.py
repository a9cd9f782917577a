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
from attnbench.metadata import SplitMetadata, VarlenMetadata
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
