"""The backend registry. A new kernel family is a new small file plus one line here.

A family kept outside this package (or a test's stand-in) joins through the environment:
ATTNBENCH_EXTRA_BACKENDS="package.module:ClassName,..." names Backend subclasses to add. It is
read at import, so worker processes started from a run see the same backends.
"""

from __future__ import annotations

import importlib
import os

import torch

from attnbench.errors import UsageError
from attnbench.kernels.backends.base import Backend
from attnbench.kernels.backends.flashinfer import FlashInferBackend
from attnbench.kernels.backends.flashinfer_ba import FlashInferBABackend
from attnbench.kernels.backends.flex import FlexBackend
from attnbench.kernels.backends.reference import ReferenceBackend
from attnbench.kernels.backends.vllm_fa2 import VllmFA2Backend
from attnbench.kernels.backends.vllm_fa3 import VllmFA3Backend
from attnbench.kernels.backends.vllm_triton import VllmTritonBackend

REGISTRY: dict[str, Backend] = {b.name: b for b in (ReferenceBackend(), VllmFA2Backend(), VllmFA3Backend(), FlexBackend(),
                                                    FlashInferBackend(), FlashInferBABackend(), VllmTritonBackend())}
EXTRA_BACKEND_ERRORS: list[str] = []  # ATTNBENCH_EXTRA_BACKENDS entries that did not load, and why


def _load_extra_backends(spec: str) -> None:
    for entry in filter(None, (part.strip() for part in spec.split(","))):
        module, _, name = entry.partition(":")
        try:
            backend = getattr(importlib.import_module(module), name)()
            if not isinstance(backend, Backend):
                raise TypeError(f"{name} is not an attnbench Backend")
            REGISTRY[backend.name] = backend
        except Exception as exc:  # any import or constructor failure: said at planning, not a traceback
            EXTRA_BACKEND_ERRORS.append(f"ATTNBENCH_EXTRA_BACKENDS: cannot load {entry} ({type(exc).__name__}: {exc})")


_load_extra_backends(os.environ.get("ATTNBENCH_EXTRA_BACKENDS", ""))


def get_backend(name: str) -> Backend:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UsageError(f"--backend: unknown backend {name!r}; choose from {', '.join(REGISTRY)}") from None


def available_backends() -> list[str]:
    return [name for name, b in REGISTRY.items() if b.unavailable_reason() is None]


def resolve_backends(requested: list[str] | None, device: torch.device) -> list[str]:
    """The backends named (each must be available), or every available kernel backend that is
    neither the oracle nor opt-in (the oracle alone on the CPU, or where no kernel backend is available)."""
    if requested:
        for name in requested:
            reason = get_backend(name).unavailable_reason()
            if reason:
                raise UsageError(f"--backend: {name} is unavailable here: {reason}")
        return requested
    oracles = [name for name, b in REGISTRY.items() if b.oracle]
    if device.type == "cpu":
        return oracles
    return [name for name in available_backends() if not REGISTRY[name].oracle and not REGISTRY[name].opt_in] \
        or oracles
