"""`attnbench doctor`: what this machine has, and whether every backend on it computes attention right.

Why a job of its own: the first question on a new machine is not "how fast" but "is it right, and
what runs here". This collects the environment (results/env.py's env.json fields, every GPU, the
clock policy; results/telemetry.py's clocks while the checks run) and checks each available
backend against the float32 reference with the kernel sweep's own machinery (kernels/sweep.py):
every strategy it declares, eager and (graph-safe, on a GPU) graph, on a decode, a prefill and a
mixed batch of one small shape it supports, a short time budget per row. On a GPU a graph-safe
backend also runs `attnbench verify`'s safe-policy replays (kernels/verify.py), and runs/l2check.py
shows that `--cold-l2`'s flush leaves L2 cold.

Each backend gets one verdict: `ok`, `FAIL` (its first failing row) or `skipped` (why it was not
checked). Everything runs in this process: a kernel fault that kills the CUDA context fails its
backend and leaves the backends after it unchecked, said so.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from attnbench.device import device_name, select
from attnbench.errors import UsageError, error_reason
from attnbench.kernels.backends.base import Backend
from attnbench.kernels.backends.registry import EXTRA_BACKEND_ERRORS, REGISTRY, get_backend
from attnbench.kernels.sweep import SweepPlan, run_sweep
from attnbench.kernels.timing import TimingConfig
from attnbench.kernels.verify import gating_failures, replay_cases, verify_rows
from attnbench.kernels.workload import SweepPoint
from attnbench.results.env import collect
from attnbench.results.telemetry import gpu_telemetry, summarize
from attnbench.runs.l2check import l2_check, l2_failed
from attnbench.workers import pool

# (heads, kv heads, head dim): GQA at 64, MHA at 128; a backend is checked on the first it supports
SHAPES = ((8, 2, 64), (4, 4, 128))
POINTS = (("decode", 8), ("prefill", 32), ("mixed", 24))  # (batch kind, query tokens)
CONTEXT = "uniform:16:128"  # varied short contexts: several pages, partly filled last pages
PREFILL_LEN = 16  # prefill: 32 tokens over two sequences
VERIFY_CONTEXTS, VERIFY_SEQS = (64, 256), 4  # verify's replays: short -> long context, sequences
BUDGET_MS = {"cpu": 5.0, "cuda": 20.0}  # sampling per row: the check is the point, not the timing
ROW_FIELDS = ("kind", "num_tokens", "num_heads", "num_kv_heads", "head_dim", "context", "strategy", "mode",
              "verdict", "rel_l2_error", "max_abs_error", "median_ms", "reason")
VERIFY_FIELDS = ("strategy", "policy", "case", "verdict", "rel_l2_error", "reason")


def plain(row: dict, keys: tuple[str, ...]) -> dict:
    """The row's `keys`, NaN as null: what a JSON reader can parse."""
    return {k: None if isinstance(row.get(k), float) and math.isnan(row[k]) else row.get(k) for k in keys}


@dataclass
class Verdict:
    """One backend's outcome: status `ok`, `FAIL` or `skipped`, and what it checked or why not."""

    backend: str
    library: str
    status: str
    detail: str
    rows: list[dict] = field(default_factory=list)
    verify: list[dict] = field(default_factory=list)

    def line(self) -> str:
        return f"{self.backend:<14} {self.library or '-':<24} {self.status}: {self.detail}"

    def to_json(self) -> dict:
        return {"backend": self.backend, "library": self.library, "status": self.status, "detail": self.detail,
                "rows": [plain(r, ROW_FIELDS) for r in self.rows],
                "verify": [plain(r, VERIFY_FIELDS) for r in self.verify]}


@dataclass
class Report:
    environment: dict
    device: str
    verdicts: list[Verdict]

    @property
    def failed(self) -> bool:
        return any(v.status == "FAIL" for v in self.verdicts) or l2_failed(self.environment.get("l2_check"))

    def cpu_note(self) -> str | None:
        """On the CPU, the one line that says what was not checked."""
        why = "--device cpu" if torch.cuda.is_available() else "no GPU visible"
        return None if self.device != "cpu" else (f"ran on the CPU ({why}): GPU kernel backends were not checked; "
                                                  "run `attnbench doctor` on a GPU machine for them")

    def summary(self) -> str:
        counts = ", ".join(f"{sum(v.status == status for v in self.verdicts)} {status}"
                           for status in ("ok", "FAIL", "skipped"))
        verdict = "something is wrong (exit 1)" if self.failed else "nothing checked is wrong"
        return f"doctor: {counts} on {self.device}: {verdict}"

    def to_json(self) -> dict:
        return {"device": self.device, "environment": self.environment,
                "backends": [v.to_json() for v in self.verdicts], "summary": self.summary(),
                "exit_code": 1 if self.failed else 0}


def check_json_path(path: Path) -> None:
    """--json names a new file in an existing directory: an existing path (a symlink too) is refused."""
    if os.path.lexists(path):
        raise UsageError(f"--json: {path} exists; doctor writes a new file (remove it or choose another path)")
    if not path.parent.is_dir():
        raise UsageError(f"--json: {path.parent} is not a directory")


def write_json(report: Report, path: Path) -> None:
    try:
        with open(path, "x") as f:  # exclusive: never through a path made since it was checked
            json.dump(report.to_json(), f, indent=1, default=str)
    except OSError as exc:
        raise UsageError(f"--json: cannot write {path} ({exc.strerror or exc})") from None


def environment(command: list[str]) -> dict:
    """env.json's fields (results/env.py), every visible GPU, and where nvidia-smi is."""
    env = collect(command)
    env["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] \
        if torch.cuda.is_available() else []
    env["nvidia_smi"] = shutil.which("nvidia-smi")
    return env


def environment_lines(env: dict) -> list[str]:
    """The environment as `name  value` lines; a value nothing could tell is `unknown: why`."""
    gpu = env.get("gpu") or {}
    unknown = ("unknown: no GPU visible" if not gpu else "unknown: nvidia-smi not found on PATH"
               if not env.get("nvidia_smi") else "unknown: nvidia-smi did not answer")
    build = f"built with CUDA {env['torch_cuda']}" if env.get("torch_cuda") else "a CPU build"
    libraries = ", ".join(f"{name} {version or 'not installed'}" for name, version in env["libraries"].items())
    lines = [("attnbench", f"{env['attnbench_version']}, git {env.get('git_sha') or 'unknown: not a git checkout'}"),
             ("python", f"{env['python']} on {env['platform']}"), ("torch", f"{env['torch']}, {build}"),
             ("libraries", libraries), ("driver", gpu.get("driver") or unknown)]
    if gpu:
        others = f"; all GPUs: {', '.join(env['gpus'])}" if len(env["gpus"]) > 1 else ""
        lines.append(("GPU", f"{gpu['name']} (compute {gpu['compute_capability']}, {gpu['multiprocessors']} SMs, "
                             f"{gpu['memory_gib']} GiB){others}"))
    else:
        lines.append(("GPU", f"none visible (torch.cuda.is_available() is False); CPU {env.get('cpu') or 'unknown'}"))
    lines += clock_lines(gpu, unknown)
    return [f"{name:<14} {value}" for name, value in lines]


def clock_lines(gpu: dict, unknown: str) -> list[tuple[str, str]]:
    """SM clocks now and at most, persistence mode, and whether clocks are locked (env.clock_policy)."""
    clocks = [c.strip() for c in (gpu.get("clocks_mhz_sm_mem_max_sm") or "").split(",")]
    sm = f"{clocks[0]} now (idle clocks run low), {clocks[2]} max" if len(clocks) == 3 else unknown
    policy = gpu.get("clock_policy")
    if policy is None:
        return [("SM clock", sm), ("persistence", unknown), ("clocks locked", unknown)]
    locked = (f"{'yes' if policy['clocks_locked'] else 'no'} (application clocks {policy['applications_clocks']}, "
              f"default {policy['default_applications_clocks']}, reason {policy['applications_clocks_reason']})")
    return [("SM clock", sm), ("persistence", policy["persistence_mode"]), ("clocks locked", locked)]


def doctor_points(backend: Backend, device: torch.device) -> tuple[list[SweepPoint], str | None]:
    """The decode, prefill and mixed points of the first shape the backend can run one of, or why none."""
    first = None
    for heads, kv_heads, dim in SHAPES:
        points = [SweepPoint(kind=kind, num_tokens=n, num_heads=heads, num_kv_heads=kv_heads, head_dim=dim,
                             context=CONTEXT, prefill_len=PREFILL_LEN) for kind, n in POINTS]
        reasons = [backend.supports(p, s, device) for p in points for s in backend.strategies]
        if not all(reasons):
            return points, None
        first = first or reasons[0]
    return [], first


def sweep_plan(backend: Backend, points: list[SweepPoint], device: torch.device) -> SweepPlan:
    graph = device.type == "cuda" and backend.graph_safe
    timing = TimingConfig(budget_ms=BUDGET_MS[device.type], rel_spread=0.05, min_samples=3,
                          warmup_ms=0.0 if device.type == "cpu" else 5.0)
    return SweepPlan(tuple(points), (backend.name,), tuple(backend.strategies),
                     ("eager", "graph") if graph else ("eager",), timing, str(device))


def shape_text(row: dict) -> str:
    return f"{row['num_heads']}/{row['num_kv_heads']}x{row['head_dim']}"


def row_text(row: dict) -> str:
    where = " ".join(filter(None, (row.get("strategy"), row.get("mode"))))
    return f"{row['kind']} N={row['num_tokens']} {' '.join(filter(None, (shape_text(row), where)))}: {row.get('reason')}"


def listed(rows: list[dict], key: str) -> str:
    """The rows' distinct values of `key`, in order."""
    return ", ".join(dict.fromkeys(str(r[key]) for r in rows))


def sweep_verdict(backend: Backend, library: str, rows: list[dict]) -> Verdict:
    """FAIL on the first row that is not pass or skipped; skipped when no row ran; else ok."""
    bad = [r for r in rows if r["verdict"] not in ("pass", "skipped")]
    passed = [r for r in rows if r["verdict"] == "pass"]
    skipped = [r for r in rows if r["verdict"] == "skipped"]
    if bad:
        return Verdict(backend.name, library, "FAIL", f"{bad[0]['verdict']} at {row_text(bad[0])}", rows)
    if not passed:
        return Verdict(backend.name, library, "skipped", skipped[0]["reason"] if skipped else "no rows", rows)
    detail = (f"{len(passed)} rows ({listed(passed, 'kind')} at {shape_text(passed[0])}; {listed(passed, 'strategy')}; "
              f"{listed(passed, 'mode')})")
    if skipped:
        detail += f", {len(skipped)} skipped ({skipped[0]['reason']})"
    return Verdict(backend.name, library, "ok", detail, rows)


def add_verify(verdict: Verdict, backend: Backend, point: SweepPoint, device: torch.device) -> None:
    """verify's safe-policy replays of a graph-safe backend; a gating failure fails it."""
    strategies = [s for s in backend.strategies if backend.graph_refusal(s) is None]
    point = SweepPoint(kind="mixed", num_tokens=VERIFY_SEQS, num_heads=point.num_heads,
                       num_kv_heads=point.num_kv_heads, head_dim=point.head_dim)
    try:
        verdict.verify = verify_rows([backend.name], strategies, ["safe"], point,
                                     replay_cases(*VERIFY_CONTEXTS, VERIFY_SEQS), device)
    except Exception as exc:  # noqa: BLE001  said in the verdict, as a row's failure is
        verdict.status, verdict.detail = "FAIL", f"verify safe: {error_reason(exc)}"
        return
    failures = gating_failures(verdict.verify)
    if failures:
        bad = failures[0]
        verdict.status, verdict.detail = "FAIL", f"verify safe {bad['strategy']} {bad['case']}: {bad['reason']}"
        return
    passed = sum(r["verdict"] == "pass" for r in verdict.verify)
    unsupported = sum(r["verdict"] == "unsupported" for r in verdict.verify)
    verdict.detail += f"; verify safe: {passed} cases pass" + (f", {unsupported} unsupported" if unsupported else "")


def check_backend(backend: Backend, device: torch.device, gpu_name: str | None) -> Verdict:
    """One backend: unavailable or unable to run here (skipped), else its sweep rows, then verify."""
    reason = backend.unavailable_reason()
    if reason:
        return Verdict(backend.name, "", "skipped", reason)
    library = " ".join(filter(None, backend.library()))
    points, why = doctor_points(backend, device)
    if not points:
        return Verdict(backend.name, library, "skipped", why or "no point it can run")
    rows: list[dict] = []
    try:
        run_sweep(sweep_plan(backend, points, device), gpu_name, rows.append)
    except Exception as exc:  # noqa: BLE001  what run_sweep lets through: freeing memory after a point failed
        return Verdict(backend.name, library, "FAIL", f"after {row_text(rows[-1]) if rows else 'a point'}: "
                       f"{error_reason(exc)}", rows)
    verdict = sweep_verdict(backend, library, rows)
    if verdict.status == "ok" and device.type == "cuda" and backend.graph_safe:
        add_verify(verdict, backend, points[0], device)
    return verdict


def backend_names(requested: list[str] | None) -> list[str]:
    """The backends to check: every one, or those named (an unknown name is bad input, said with
    the extra backends that did not load: it may be one of them)."""
    for name in requested or []:
        try:
            get_backend(name)
        except UsageError as exc:
            raise UsageError("; ".join([str(exc), *EXTRA_BACKEND_ERRORS])) from None
    return list(requested or REGISTRY)


def run_doctor(device: torch.device, env: dict, names: list[str], on_verdict: Callable[[Verdict], None]) -> Report:
    """Check each backend named (backend_names) in turn, on_verdict hearing each verdict as it is
    made; stop checking at a dead CUDA context, whose cause is the backend that just ran."""
    verdicts = [Verdict("ATTNBENCH_EXTRA_BACKENDS", "", "FAIL", error) for error in EXTRA_BACKEND_ERRORS]
    for verdict in verdicts:
        on_verdict(verdict)
    dead, gpu_name = None, device_name(select(device))  # events and graphs are made on the current device
    with gpu_telemetry(str(device), None) as sampler:
        for name in names:
            if dead is not None:
                verdict = Verdict(name, "", "skipped", f"not checked: the CUDA context died in {dead}'s checks; "
                                                       f"check it alone with --backend {name}")
            else:
                verdict = check_backend(REGISTRY[name], device, gpu_name)
                if not pool.cuda_healthy():  # looked up at call time: a test-only backend may replace it
                    dead = name
                    verdict.status, verdict.detail = "FAIL", f"the CUDA context died in its checks: {verdict.detail}"
            verdicts.append(verdict)
            on_verdict(verdict)
        env["l2_check"] = l2_check(device, [v.backend for v in verdicts if v.status == "ok"])
    if sampler.samples:
        env["clocks_while_checking"] = summarize(sampler.samples, sampler.max_sm_mhz)
    return Report(env, str(device), verdicts)


def clocks_line(env: dict) -> str | None:
    """The GPU's clocks while the checks ran (telemetry), when anything was sampled."""
    seen = env.get("clocks_while_checking")
    if not seen:
        return None
    return (f"{'clocks':<14} while checking: SM median {seen['sm_clock_median_mhz']:.0f} MHz (min "
            f"{seen['sm_clock_min_mhz']:.0f}), throttle reasons: {seen['throttle_reasons'] or 'none'}"
            f"{'; ' + seen['clock_flag'] if seen['clock_flag'] else ''}")
