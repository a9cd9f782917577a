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


def worst_check(checks: list[dict], where: Callable[[int, int], str] | None = None) -> dict:
    """One verdict over several checks of the same output: the first failing one (NaN never passes),
    its reason put into `where(i, n)` (a template with {}; default "replicate i+1 of n: {}" when n > 1),
    else the passing check with the largest error."""
    failed = [i for i, c in enumerate(checks) if c["verdict"] != "pass"]
    if not failed:
        return max(checks, key=lambda c: c["rel_l2_error"])
    i, n = failed[0], len(checks)
    template = where(i, n) if where else (f"replicate {i + 1} of {n}: {{}}" if n > 1 else "{}")
    return {**checks[i], "reason": template.format(checks[i]["reason"])}


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
    return worst_check(checks, lambda i, n: "{}" if i == 0 else
                       "on a second run: {} (the first run passed: the launch does not redo its work when run again)")
