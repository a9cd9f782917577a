"""The backend registry. A new kernel family is a new small file plus one line here."""

from __future__ import annotations

from attnbench.backends.base import STRATEGIES, Backend, Kernel
from attnbench.backends.reference import ReferenceBackend
from attnbench.backends.vllm_fa2 import VllmFA2Backend
from attnbench.backends.vllm_fa3 import VllmFA3Backend
from attnbench.errors import UsageError

REGISTRY: dict[str, Backend] = {b.name: b for b in (ReferenceBackend(), VllmFA2Backend(), VllmFA3Backend())}


def get_backend(name: str) -> Backend:
    try:
        return REGISTRY[name]
    except KeyError:
        raise UsageError(f"--backend: unknown backend {name!r}; choose from {', '.join(REGISTRY)}") from None


def available_backends() -> list[str]:
    return [name for name, b in REGISTRY.items() if b.unavailable_reason() is None]


__all__ = ["STRATEGIES", "Backend", "Kernel", "REGISTRY", "get_backend", "available_backends"]
