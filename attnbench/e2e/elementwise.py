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
import statistics
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from attnbench.errors import UsageError
from attnbench.kernels.timing import estimate_replay_ms


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


PROJECTIONS = ("linear", "gemv", "auto")  # F.linear (cuBLAS picks its kernel); fused_ops.gemv for one-token
# steps; or, per weight shape, whichever of the two one-token calls timed faster on this GPU (choose_projections)
AUTO_MARGIN = 0.98  # "auto" takes the GEMV for a shape only below 98 % of F.linear's time: a near tie keeps cuBLAS
AUTO_ROUNDS = 5  # timings per way and shape, the two ways in turns (clock drift hits both); medians compared


def projection(kind: str, device: torch.device | str, choices: dict[tuple[int, int], str] | None = None):
    """The model's projection call (x, w, bias=None) for `kind` on `device`: F.linear; or, with
    "gemv" (CUDA only), fused_ops.gemv's one-pass Triton GEMV where a step has one token row
    (a batch-1 decode step: there it reads each weight once, with no split-K) and F.linear else;
    "auto" does that only for the weight shapes `choices` maps to "gemv" (choose_projections)."""
    if kind not in PROJECTIONS:
        raise UsageError(f"projection: unknown {kind!r}; choose from {', '.join(PROJECTIONS)}")
    if kind == "linear":
        return F.linear
    ops = triton_kernels(f"projection {kind}", device)
    if kind == "auto" and choices is None:
        raise ValueError("projection auto: give the per-shape choices (choose_projections measures them)")
    gemv_shapes = None if kind == "gemv" else {shape for shape, choice in choices.items() if choice == "gemv"}

    def gemv_or_linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        if x.numel() != x.shape[-1] or (gemv_shapes is not None and tuple(w.shape) not in gemv_shapes):
            return F.linear(x, w, bias)
        y = ops.gemv(x, w)
        return y if bias is None else y + bias
    return gemv_or_linear


@dataclass(frozen=True)
class ShapeChoice:
    """One weight shape's one-token call, both ways, as "auto" measured it (microseconds a call)."""

    linear_us: float
    gemv_us: float
    choice: str  # "gemv" or "linear"

    def describe(self, shape: tuple[int, int]) -> str:
        return f"{shape[0]}x{shape[1]} {self.choice} (linear {self.linear_us:.1f} us, gemv {self.gemv_us:.1f} us)"


def graph_us(calls: Callable[[], object], reps: int = 20) -> float:
    """Microseconds of one replay of `calls` captured in a CUDA graph, over `reps` replays back to
    back between CUDA events (kernels.timing.estimate_replay_ms: its TimedKernel runs the calls first
    on a side stream, outside the capture, so an autotuner or a JIT runs there): the calls' GPU
    time with no host work between."""
    return estimate_replay_ms(calls, torch.device("cuda", torch.cuda.current_device()), reps) * 1e3


def choose_projections(weights: dict[tuple[int, int], list[torch.Tensor]], gemv: Callable,
                       time_us: Callable[[Callable[[], object]], float] = graph_us) -> dict[tuple[int, int], ShapeChoice]:
    """Per weight shape, whether the one-token call is faster as F.linear or as `gemv`: every weight
    of the shape called on one token row in turn (one matrix repeated would find itself in L2),
    timed AUTO_ROUNDS times each way, the two ways alternating; the GEMV is chosen where its median
    is below AUTO_MARGIN of F.linear's."""
    chosen = {}
    for shape, ws in weights.items():
        x = torch.randn(1, shape[1], dtype=ws[0].dtype, device=ws[0].device)
        ways = {"linear": lambda: [F.linear(x, w) for w in ws], "gemv": lambda: [gemv(x, w) for w in ws]}
        times: dict[str, list[float]] = {name: [] for name in ways}
        for _ in range(AUTO_ROUNDS):
            for name, calls in ways.items():
                times[name].append(time_us(calls) / len(ws))
        linear_us, gemv_us = (statistics.median(times[name]) for name in ways)
        chosen[shape] = ShapeChoice(linear_us, gemv_us, "gemv" if gemv_us < AUTO_MARGIN * linear_us else "linear")
    return chosen
