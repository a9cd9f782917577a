"""What machine and software produced a result: written to env.json beside every run.

Besides versions it records what makes timings move between runs: on a GPU the clock policy
(persistence mode, application clocks against their defaults, the clock event reasons active at
the start: a user's locked clocks show as `applications_clocks_setting`); on the CPU the threads
a sweep uses and the load average when it started. attnbench never changes clocks itself.
"""

from __future__ import annotations

import datetime as dt
import importlib.util
import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata as importlib_metadata
from pathlib import Path

import torch

import attnbench
from attnbench.kernels.backends.registry import REGISTRY
from attnbench.kernels.timing import cpu_threads

# env.json entries whose values must agree for two sets of rows to be comparable (resume, merge)
RESUME_MUST_MATCH = ("attnbench_version", "torch", "torch_cuda", "gpu.name", "backend_libraries")


def env_value(env: dict, dotted: str):
    """env["a"]["b"] for "a.b"; None where a level is missing."""
    for part in dotted.split("."):
        env = env.get(part) if isinstance(env, dict) else None
    return env


def _dist_version(name: str) -> str | None:
    try:
        return importlib_metadata.version(name)
    except importlib_metadata.PackageNotFoundError:
        return None


def _git_sha() -> str | None:
    root = Path(attnbench.__file__).resolve().parent.parent
    try:
        out = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def _nvidia_smi(fields: str) -> str | None:
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def fa_module_archs() -> list[str] | None:
    """GPU code vLLM's flash-attention modules carry, from cuobjdump: 'module:sass|ptx:sm_XX'.

    On Hopper, vLLM's FA2 carries sm_80 code only, so the driver JIT-compiles its PTX: that is
    part of the answer and belongs in env.json.
    """
    spec = importlib.util.find_spec("vllm.vllm_flash_attn") if importlib.util.find_spec("vllm") else None
    if spec is None or not spec.submodule_search_locations:
        return None
    archs = set()
    for so in Path(list(spec.submodule_search_locations)[0]).glob("_vllm_fa*_C*.so"):
        for flag, kind in (("--list-elf", "sass"), ("--list-ptx", "ptx")):
            try:
                out = subprocess.run(["cuobjdump", flag, str(so)], capture_output=True, text=True, timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                return None
            archs.update(f"{so.name.split('.')[0]}:{kind}:{part}" for token in out.stdout.split()
                         for part in token.split(".") if part.startswith("sm_"))
    return sorted(archs) or None


def collect(command: list[str] | None = None) -> dict:
    env: dict = {
        "attnbench_version": attnbench.__version__,
        "git_sha": _git_sha(),
        "command": shlex.join(command if command is not None else sys.argv),
        "timestamp": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "libraries": {name: _dist_version(name) for name in
                      ("vllm", "vllm-flash-attn", "flash-attn", "flashinfer-python", "triton", "pandas")},
        "backends": {name: (b.unavailable_reason() or "available") for name, b in REGISTRY.items()},
        "backend_libraries": {name: "/".join(b.library()) for name, b in REGISTRY.items()
                              if b.unavailable_reason() is None},
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env["gpu"] = {
            "name": props.name,
            "compute_capability": f"{props.major}.{props.minor}",
            "multiprocessors": props.multi_processor_count,
            "memory_gib": round(props.total_memory / 2**30, 1),
            "l2_mib": round(getattr(props, "L2_cache_size", 0) / 2**20, 1),
            "driver": _nvidia_smi("driver_version"),
            "clocks_mhz_sm_mem_max_sm": _nvidia_smi("clocks.sm,clocks.mem,clocks.max.sm"),
            "power_limit_w": _nvidia_smi("power.limit"),
            "clock_policy": clock_policy(),
        }
        env["fa_module_archs"] = fa_module_archs()
    else:
        env["gpu"] = None
        env["cpu"] = platform.processor() or platform.machine()
        env["cpu_threads"] = cpu_threads()  # what the sweep sets (kernels/timing.py), not torch's default
        env["cpu_count"] = os.cpu_count()
        env["cpu_load_1_5_15"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    return env


def clock_policy() -> dict | None:
    """Persistence mode and whether clocks are pinned (application clocks set away from their
    defaults, or the applications-clocks event reason active: what `nvidia-smi -lgc` shows as)."""
    fields = ["persistence_mode", "clocks.applications.graphics", "clocks.default_applications.graphics",
              "clocks_event_reasons.applications_clocks_setting"]
    line = _nvidia_smi(",".join(fields))
    if line is None:
        return None
    values = dict(zip(fields, (v.strip() for v in line.split(","))))
    pinned = values[fields[1]] != values[fields[2]] or values[fields[3]].lower() == "active"
    return {"persistence_mode": values[fields[0]], "applications_clocks": values[fields[1]],
            "default_applications_clocks": values[fields[2]], "applications_clocks_reason": values[fields[3]],
            "clocks_locked": pinned}
