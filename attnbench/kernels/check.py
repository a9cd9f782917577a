"""Is a kernel's output right? Relative L2 and max abs error against the float32 reference."""

from __future__ import annotations

from collections.abc import Callable

import torch

# relative L2 error allowed against the float32 reference (FA2 measured ~2e-3 in bf16)
REL_L2_TOLERANCE = {"bfloat16": 1e-2, "float16": 5e-3}


def check_output(out: torch.Tensor, ref: torch.Tensor, dtype: str) -> dict:
    """Relative L2 and max abs error against the reference; NaN or inf never passes."""
    out32 = out.float()
    tol = REL_L2_TOLERANCE[dtype]
    finite = bool(torch.isfinite(out32).all())
    diff = out32 - ref
    rel = float(diff.norm() / ref.norm().clamp_min(1e-30)) if finite else float("nan")
    max_abs = float(diff.abs().max()) if finite else float("nan")
    ok = finite and rel <= tol
    reason = "" if ok else ("output has NaN/inf" if not finite else f"rel L2 error {rel:.2e} > {tol:g}")
    return {"rel_l2_error": rel, "max_abs_error": max_abs, "tolerance": tol,
            "verdict": "pass" if ok else "fail", "reason": reason}


def check_twice(run: Callable[[], object], out: torch.Tensor, ref: torch.Tensor, dtype: str) -> dict:
    """Poison `out` with NaN, run, check; then again. A launch that does its work only once (state
    it never resets, as FlashInfer 0.6.6's POD under a CUDA graph: pod.cuh zeroes its CTA-scheduler
    counters with a cudaMemset on the legacy stream, which a graph does not replay) leaves the
    second run's rows unwritten, where a single check would have read the first run's output."""
    checks = []
    for _ in range(2):
        out.fill_(float("nan"))  # a row passes only if every element was written by this run
        run()
        checks.append(check_output(out, ref, dtype))
    first, second = checks
    if first["verdict"] != "pass":
        return first
    if second["verdict"] != "pass":
        return {**second, "reason": f"on a second run: {second['reason']} (the first run passed: the launch does not "
                                    "redo its work when run again)"}
    return max(checks, key=lambda c: c["rel_l2_error"])
