"""The backend registry. A new kernel family is a new small file plus one line here."""

from __future__ import annotations

import torch

from attnbench.errors import UsageError
from attnbench.kernels.backends.base import Backend
from attnbench.kernels.backends.reference import ReferenceBackend
from attnbench.kernels.backends.vllm_fa2 import VllmFA2Backend
from attnbench.kernels.backends.vllm_fa3 import VllmFA3Backend

REGISTRY: dict[str, Backend] = {b.name: b for b in (ReferenceBackend(), VllmFA2Backend(), VllmFA3Backend())}


def get_backend(name: str) -> Backend:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UsageError(f"--backend: unknown backend {name!r}; choose from {', '.join(REGISTRY)}") from None


def available_backends() -> list[str]:
    return [name for name, b in REGISTRY.items() if b.unavailable_reason() is None]


def resolve_backends(requested: list[str] | None, device: torch.device) -> list[str]:
    """The backends named (each must be available), or every available non-oracle kernel backend
    (the oracle alone on the CPU, or where no kernel backend is available)."""
    if requested:
        for name in requested:
            reason = get_backend(name).unavailable_reason()
            if reason:
                raise UsageError(f"--backend: {name} is unavailable here: {reason}")
        return requested
    oracles = [name for name, b in REGISTRY.items() if b.oracle]
    if device.type == "cpu":
        return oracles
    return [name for name in available_backends() if not REGISTRY[name].oracle] or oracles
