"""What machine and software produced a result: written to env.json beside every run."""

from __future__ import annotations

import datetime as dt
import importlib.util
import platform
import shlex
import subprocess
import sys
from importlib import metadata as importlib_metadata
from pathlib import Path

import torch

import attnbench
from attnbench.kernels.backends.registry import REGISTRY


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
        }
        env["fa_module_archs"] = fa_module_archs()
    else:
        env["gpu"] = None
        env["cpu"] = platform.processor() or platform.machine()
        env["cpu_threads"] = torch.get_num_threads()
    return env
