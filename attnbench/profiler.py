"""Profiling capture, beside the code it times: NVTX ranges and torch.profiler runs into a run directory.

`--profile` runs torch.profiler over extra calls of an already-timed callable (never over the
timed samples, whose medians stay unperturbed) and leaves, per label, in the run directory:
- profile/tb/<label>.<ns>.pt.trace.json: what torch.profiler.tensorboard_trace_handler writes,
  the layout TensorBoard's torch-tb-profiler plugin reads (`tensorboard --logdir <run dir>`);
- profile/chrome/<label>.json: the same Chrome trace under a stable name for ui.perfetto.dev
  (kineto saves a trace once, so this is a copy of the handler's file, not a second export);
- profile_kernels.csv: the kernel breakdown (calls, total and mean µs, share);
- profile/profiler.log: what the profiler's C++ side (kineto) prints to the process's stdout and
  stderr (`USDT: ... profiler_start`, warnings), written straight to file descriptors 1 and 2 past
  Python's sys.stdout, and torch.profiler's Python warnings: both used to land in the progress bar
  (native_output_to).
Kernels replayed from a CUDA graph have no CPU op to be attributed to, so rows are keyed by the
kernel's own name. Without a GPU the breakdown falls back to CPU ops' self time, so the CPU path
still yields a table. NVTX ranges (`nvtx_range`) mark sweep points and engine steps for Nsight
Systems; they cost nothing without CUDA. It sits at the bottom of the package (kernels/ and e2e/
call it); results/profiling.py reads what it leaves and writes the report.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import sys
import warnings
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator

import torch
from torch.autograd import DeviceType
from torch.profiler import (
    ProfilerActivity,
    profile,
    schedule,
    tensorboard_trace_handler,
)

ATTENTION_KERNEL = re.compile(r"flash|fmha|attn|attention", re.IGNORECASE)
BREAKDOWN_COLUMNS = ["source", "rank", "kernel", "calls", "calls_per_step", "total_us", "mean_us", "share",
                     "attention", "steps", "chrome_trace"]
CSV_NAME, TRACE_DIR, LOG_NAME = "profile_kernels.csv", "profile", "profiler.log"


@lru_cache(maxsize=1)
def _cuda() -> bool:
    return torch.cuda.is_available()


@contextmanager
def nvtx_range(name: str) -> Iterator[None]:
    """An NVTX range for Nsight Systems when CUDA is there, else nothing; inside a torch.profiler
    window it is also a record_function range, so the same names show in the torch traces."""
    profiling = getattr(torch.autograd.profiler, "_is_profiler_enabled", False)
    if not (_cuda() or profiling):
        yield
        return
    if _cuda():
        torch.cuda.nvtx.range_push(name)
    try:
        if profiling:
            with torch.profiler.record_function(name):
                yield
        else:
            yield
    finally:
        if _cuda():
            torch.cuda.nvtx.range_pop()


@dataclass
class Profile:
    """One profiled label: its breakdown rows and where its traces are."""

    label: str
    source: str  # "device": GPU kernels' device time; "cpu": CPU ops' self time (no GPU activity)
    rows: list[dict]
    steps: int
    ranges: dict[str, tuple[int, float]] = field(default_factory=dict)  # annotation -> (count, total µs)
    tb_trace: Path | None = None
    chrome_trace: Path | None = None


def kernel_breakdown(events, steps: int) -> tuple[str, list[dict]]:
    """Device kernels (and memcpy/memset) grouped by name, largest total first; CPU ops' self
    time when the window holds no device activity. Annotations (ProfilerStep#, ranges) are not work."""
    device = [e for e in events if e.device_type == DeviceType.CUDA and not e.is_user_annotation]
    source = "device" if device else "cpu"
    chosen = device or [e for e in events if e.device_type == DeviceType.CPU and not e.is_user_annotation]
    calls: dict[str, int] = defaultdict(int)
    total: dict[str, float] = defaultdict(float)
    for e in chosen:
        calls[e.name] += 1
        total[e.name] += e.device_time_total if device else e.self_cpu_time_total
    grand = sum(total.values()) or 1.0
    ordered = sorted(total, key=total.get, reverse=True)
    return source, [{"source": source, "rank": i + 1, "kernel": name, "calls": calls[name],
                     "calls_per_step": calls[name] / steps, "total_us": round(total[name], 3),
                     "mean_us": round(total[name] / calls[name], 3), "share": round(total[name] / grand, 5),
                     "attention": bool(ATTENTION_KERNEL.search(name)), "steps": steps}
                    for i, name in enumerate(ordered)]


def annotation_ranges(events) -> dict[str, tuple[int, float]]:
    """Named ranges in the window (engine steps, sweep points) -> (count, total wall µs)."""
    found: dict[str, list[float]] = defaultdict(list)
    for e in events:
        if e.is_user_annotation and e.device_type == DeviceType.CPU and not e.name.startswith("ProfilerStep"):
            found[e.name].append(e.cpu_time_total)
    return {name: (len(times), round(sum(times), 3)) for name, times in found.items()}


@contextmanager
def native_output_to(log: Path) -> Iterator[None]:
    """File descriptors 1 and 2 into `log` (appended), while Python's sys.stdout and sys.stderr keep
    writing where they did: a rich console (the progress bar) reads sys.stdout when it writes, so it
    goes on drawing while what C++ code writes to the descriptors goes to the file."""
    log.parent.mkdir(parents=True, exist_ok=True)
    names = {1: "stdout", 2: "stderr"}
    for name in names.values():
        getattr(sys, name).flush()
    saved = {fd: os.dup(fd) for fd in names}
    python = {name: getattr(sys, name) for name in names.values()}
    for fd, name in names.items():  # a stream on the descriptor itself would follow it into the file
        if _writes_to(python[name], fd):
            setattr(sys, name, open(saved[fd], "w", buffering=1, encoding=python[name].encoding or "utf-8",
                                    errors="replace", closefd=False))
    try:
        with log.open("ab") as f, warnings.catch_warnings():
            # the profiler's own Python warnings ("Profiler clears events at the end of each cycle") too
            warnings.showwarning = lambda message, category, filename, lineno, file=None, line=None: f.write(
                warnings.formatwarning(message, category, filename, lineno, line).encode())
            for fd in names:
                os.dup2(f.fileno(), fd)
            yield
    finally:
        for name in names.values():
            getattr(sys, name).flush()
            setattr(sys, name, python[name])
        for fd, copy in saved.items():
            os.dup2(copy, fd)
            os.close(copy)


def _writes_to(stream, fd: int) -> bool:
    try:
        return stream.fileno() == fd
    except (AttributeError, OSError, ValueError):  # a test's StringIO, a closed stream
        return False


def profile_callable(fn: Callable[[], object], out_dir: Path, label: str, active: int = 3,
                     wait: int = 1, warmup: int = 1) -> Profile:
    """Run fn (a timing.Runner or any zero-argument callable) wait + warmup + active times under
    torch.profiler; one profiler step per call. Traces go under out_dir/tb and out_dir/chrome."""
    device = getattr(fn, "device", None)
    cuda = _cuda() and (device is None or torch.device(device).type == "cuda")
    tb_dir, chrome = out_dir / "tb", out_dir / "chrome" / f"{label}.json"
    tb_handler = tensorboard_trace_handler(str(tb_dir), worker_name=label)
    result = Profile(label, "cpu", [], active, chrome_trace=chrome)

    def on_trace_ready(prof) -> None:
        before = set(tb_dir.glob("*.pt.trace.json"))
        tb_handler(prof)
        written = sorted(set(tb_dir.glob(f"{label}.*.pt.trace.json")) - before)
        result.tb_trace = written[-1] if written else None
        chrome.parent.mkdir(parents=True, exist_ok=True)
        if result.tb_trace is not None:
            shutil.copyfile(result.tb_trace, chrome)
        events = prof.events()
        result.source, result.rows = kernel_breakdown(events, active)
        result.ranges = annotation_ranges(events)

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with native_output_to(out_dir / LOG_NAME), profile(
            activities=activities, schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
            on_trace_ready=on_trace_ready, record_shapes=False) as prof:
        for _ in range(wait + warmup + active):
            fn()
            if cuda:
                torch.cuda.synchronize(device)
            prof.step()
    return result


def profile_to_run(fn: Callable[[], object], run_dir: Path, label: str, context: dict, **schedule_args) -> Profile | None:
    """Profile fn into run_dir/profile and append its breakdown to run_dir/profile_kernels.csv.

    A profiling failure is written there as an error row instead of raised: the measured rows it
    follows are already saved, and one broken trace must not cost them.
    """
    try:
        result = profile_callable(fn, run_dir / TRACE_DIR, label, **schedule_args)
    except Exception as exc:  # recorded, shown by write_report
        append_rows(run_dir, [{**context, "label": label, "source": "error",
                               "kernel": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]}])
        return None
    trace = str(result.chrome_trace.relative_to(run_dir)) if result.chrome_trace else ""
    rows = [{**context, "label": label, **row, "chrome_trace": trace} for row in result.rows]
    rows += [{**context, "label": label, "source": "range", "kernel": name, "calls": n, "calls_per_step": n / result.steps,
              "total_us": us, "mean_us": round(us / n, 3), "steps": result.steps, "chrome_trace": trace}
             for name, (n, us) in result.ranges.items()]
    append_rows(run_dir, rows)
    return result


def profile_generation(engine, prompts: list[list[int]], output_len: int, run_dir: Path, row: dict) -> Profile | None:
    """e2e: one whole request run (its prefill and decode steps, each an NVTX/record_function
    range) profiled after a row's measured runs, one wait and one warm-up run before it."""
    context = {k: row[k] for k in ("input_len", "output_len", "batch_size", "backend", "strategy", "mode")}
    label = "e2e-in{input_len}-out{output_len}-bs{batch_size}-{backend}-{strategy}-{mode}".format(**context)
    return profile_to_run(lambda: engine.generate(prompts, output_len), run_dir, label, context, active=1)


def append_rows(run_dir: Path, rows: list[dict]) -> None:
    """Append to profile_kernels.csv; its header is the first rows' context keys + BREAKDOWN_COLUMNS."""
    if not rows:
        return
    path = run_dir / CSV_NAME
    if path.exists() and path.stat().st_size > 0:
        with path.open(newline="") as f:
            columns = next(csv.reader(f))
    else:
        context = [k for k in rows[0] if k not in BREAKDOWN_COLUMNS and k != "label"]
        columns = ["label", *context, *BREAKDOWN_COLUMNS]
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        if f.tell() == 0:
            writer.writeheader()
        writer.writerows(rows)
