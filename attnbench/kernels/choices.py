"""The names the choice flags take, as plain data: the CLI checks a choice against them before
torch is imported, so a mistyped --strategy, --kind, --mode, --dtype, --backend or --device
answers at once (tests/test_cli_startup.py); the code that acts on a choice reads it from here or
from kernels/workload.py (kinds, strategies, dtypes), which imports no torch either.
"""

from __future__ import annotations

import os
import re
import sys

MODES = ("eager", "graph")
# the registry's own backends, in its order (kernels/backends/registry.py; a test keeps them equal)
BACKENDS = ("reference", "vllm-fa2", "vllm-fa3", "flex", "flashinfer", "flashinfer-ba", "vllm-triton")
DEVICE = re.compile(r"auto|(cpu|cuda)(:\d+)?")


def known_backends() -> tuple[str, ...] | None:
    """The backend names to check --backend against before the registry is imported, or None when
    only the registry knows them: it is loaded already (its own check costs nothing then, and
    says more), or ATTNBENCH_EXTRA_BACKENDS adds backends whose names their modules hold."""
    if "attnbench.kernels.backends.registry" in sys.modules or os.environ.get("ATTNBENCH_EXTRA_BACKENDS"):
        return None
    return BACKENDS
