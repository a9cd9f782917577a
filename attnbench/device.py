"""Which device a run uses, from the --device flag: shared by the kernel sweep and e2e."""

from __future__ import annotations

import torch

from attnbench.errors import UsageError


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device: unknown device {name!r}; use auto, cuda, cuda:N or cpu") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device: CUDA was asked for but no GPU is visible")
    if device.type not in ("cuda", "cpu"):
        raise UsageError(f"--device: {name!r} is not supported; use cuda or cpu")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise UsageError(f"--device: {name} does not exist; this machine has {torch.cuda.device_count()} GPU(s)")
    return device


def device_name(device: torch.device) -> str | None:
    """The GPU's name, or None on the CPU."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else None


def select(device: torch.device) -> torch.device:
    """Make `device` the current CUDA device (a no-op on the CPU). CUDA events, streams and graph
    captures are made on the current device, not the tensors': timing cuda:1 from a process whose
    current device is cuda:0 would record its events on the wrong GPU."""
    if device.type == "cuda":
        # a bare "cuda" means the current device; set_device itself refuses a device without an index
        torch.cuda.set_device(device.index if device.index is not None else torch.cuda.current_device())
    return device


def point_timeout_s(requested: float | None, device: torch.device) -> float:
    """--point-timeout, or its default: 600 s on a GPU (above FA2's 1-2 minute first-use PTX compile
    on Hopper), 120 s on the CPU. One rule for the kernel sweep and e2e."""
    if requested is not None:
        return requested
    return 120.0 if device.type == "cpu" else 600.0
