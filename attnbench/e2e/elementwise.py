"""Which implementation runs the model's small elementwise ops, and the record of it.

Why it exists: nano-vllm's habit, a chain of small elementwise ops becomes one kernel on CUDA. A
decode step at batch 1 is weight-read bound; ~40 tiny elementwise kernels per layer would add
milliseconds even inside a CUDA graph. model.py defines each op in plain torch and marks it
`@fused`: the function is the reference and the CPU path, and on CUDA the op runs the
hand-written Triton kernel of the same name in fused_ops.py, launched directly (torch.compile
fused them too, but charged every eager call its dispatch). Where triton does not import or a
kernel fails, CUDA runs the plain function, and `fused.status` says so: it goes into env.json
and every e2e row as `fused_ops`, since a silent fallback would be a wrong result.
"""

from __future__ import annotations

import functools
import warnings

import torch
import torch.nn.functional as F

from attnbench.errors import UsageError


class fused:
    """An elementwise op: its plain torch function, and on CUDA its Triton launcher."""

    status = "plain torch (Triton kernels only on CUDA)"
    KERNELS = "triton kernels: RMSNorm, residual add + RMSNorm, RoPE, SiLU-and-mul"

    def __init__(self, fn):
        self.fn, self.kernel = fn, None
        functools.update_wrapper(self, fn)

    def __call__(self, x: torch.Tensor, *args):
        if not x.is_cuda:
            return self.fn(x, *args)
        if self.kernel is None:
            ops = triton_ops()
            self.kernel = self.fn if ops is None else getattr(ops, self.__name__)
        if self.kernel is self.fn:
            return self.fn(x, *args)
        try:
            return self.kernel(x, *args)
        except Exception as exc:  # noqa: BLE001  record it, keep the run going unfused
            self.kernel = self.fn
            fused.status += f"; {self.__name__} runs plain torch: its Triton kernel failed ({exc!r:.160})"
            warnings.warn(fused.status, stacklevel=2)
            return self.fn(x, *args)


@functools.cache
def triton_ops():
    """fused_ops, imported on the first CUDA call (it imports triton); None where triton does not."""
    try:
        from attnbench.e2e import fused_ops
    except ImportError as exc:
        fused.status = f"plain torch: triton does not import ({exc!r:.160})"
        return None
    fused.status = fused.KERNELS
    return fused_ops


def triton_kernels(choice: str, device: torch.device | str):
    """fused_ops, for a choice that names one of its kernels (its flag and value, for the message):
    on CUDA only, and only where triton imports."""
    if torch.device(device).type != "cuda":
        raise UsageError(f"{choice}: a Triton kernel, it needs a CUDA device (here: {device})")
    ops = triton_ops()
    if ops is None:
        raise UsageError(f"{choice}: {fused.status}")
    return ops


PROJECTIONS = ("linear", "gemv")  # F.linear (cuBLAS picks its kernel), or fused_ops.gemv for one-token steps


def projection(kind: str, device: torch.device | str):
    """The model's projection call (x, w, bias=None) for `kind` on `device`: F.linear; or, with
    "gemv" (CUDA only), fused_ops.gemv's one-pass Triton GEMV where a step has one token row
    (a batch-1 decode step: there it reads each weight once, with no split-K) and F.linear else."""
    if kind not in PROJECTIONS:
        raise UsageError(f"projection: unknown {kind!r}; choose from {', '.join(PROJECTIONS)}")
    if kind == "linear":
        return F.linear
    ops = triton_kernels("projection gemv", device)

    def gemv_or_linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if x.numel() != x.shape[-1]:
            return F.linear(x, w, bias)
        y = ops.gemv(x, w)
        return y if bias is None else y + bias
    return gemv_or_linear
