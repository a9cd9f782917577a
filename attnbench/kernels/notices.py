"""What a kernel sweep says before it runs: the defaults chosen on the user's behalf (scaled down
on the CPU), the points left out because they cannot fit, and the backends that run other than asked.

kernels/plan.py decides all of it while planning; the lines are made here so that the job
(runs/kernel.py), torchrun's rank 0 and `attnbench run --check` print the same ones. The CPU line
has one shape for every command that scales its defaults on the CPU (cpu_run_line).
"""

from __future__ import annotations

import torch

from attnbench.kernels.backends.registry import REGISTRY
from attnbench.kernels.workload import SweepPoint


def notices(device: torch.device, scaled: dict[str, str], backend_named: bool, backends: list[str],
            modes: list[str], unfit: list[tuple[SweepPoint, str]], missing: list[tuple[str, str]] = (),
            named: bool = False) -> list[str]:
    """What was chosen on the user's behalf, or left out, said before the sweep runs. scaled: the
    defaults the device chose (flag -> value); missing: (backend, strategy) pairs whose backend has
    no such strategy: not run for the default strategies, `skipped` rows for ones asked for (named)."""
    on_cpu = device.type == "cpu"
    said = []
    if unfit:
        point, why = unfit[0]
        said.append(f"{len(unfit)} point(s) cannot fit here (the first: {point.kind}, {point.num_tokens} tokens, "
                    f"{point.num_heads}x{point.head_dim}, {why}): their rows are `skipped` with the reason.")
    if missing:
        pairs = ", ".join(f"{b} {s}" for b, s in missing)
        said.append(f"Asked for, but the backend lacks the strategy: {pairs}: `skipped` rows say so" if named else
                    f"Not run, the backend lacking the strategy: {pairs}")
        said[-1] += " (`attnbench backends` lists each backend's)."
    if on_cpu and (scaled or not backend_named):
        runs = ", ".join(backends) if backend_named else "the reference backend (plain torch, perf_counter timing)"
        said.append(cpu_run_line(runs, scaled))
    elif all(REGISTRY[b].oracle for b in backends) and not backend_named:
        said.append("No GPU kernel backend is available (see `attnbench backends`): "
                    "timing the reference backend on the GPU.")
    if not on_cpu and "graph" in modes and any(not REGISTRY[b].graph_safe for b in backends):
        unsafe = [b for b in backends if not REGISTRY[b].graph_safe]
        said.append(f"{', '.join(unsafe)} rows are eager only (not graph-safe).")
    return said


def cpu_run_line(runs: str, scaled: dict[str, str]) -> str:
    """The one line a command prints when it runs on the CPU: what runs there, and each default
    scaled down for it (flag -> value), e.g. `CPU run: the reference backend, defaults scaled to
    --context 256 (pass --context to choose).`"""
    line = f"CPU run: {runs}"
    if scaled:
        line += (f", defaults scaled to {' '.join(f'--{k} {v}' for k, v in scaled.items())} "
                 f"(pass {'/'.join(f'--{k}' for k in scaled)} to choose)")
    return line + "."
