"""GPU telemetry while a run measures: SM and memory clock, temperature, power, throttle reasons.

Why: a slower row is only a regression if the GPU ran the same way. A background thread samples
the GPU every ~250 ms while the sweep runs; every timed row gets the clocks seen while it was
timed (its `_window`: wall-clock start and end over its replicates) and a `clock_flag` when a
throttle reason was active or its median SM clock was below 95 % of the GPU's maximum. The raw
samples go to telemetry.csv in the run directory.

Sources, in order: NVML through `pynvml` (nvidia-ml-py) when it imports and initialises; else one
`nvidia-smi --query-gpu=... -lms 250` process streaming CSV lines (one process, not one per
sample); else nothing. No GPU, no nvidia-smi, a field the driver does not know: no telemetry and
no error. A source that stops mid-run (SourceLost) ends the sampling, not the run: the rows timed
after it say why in their clock_flag. attnbench never changes clocks (docs/guides/kernel.md#how-it-measures:
how to lock them yourself).
"""

from __future__ import annotations

import csv
import io
import math
import os
import shutil
import statistics
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, astuple, dataclass, fields
from pathlib import Path
from typing import Iterator

from attnbench.kernels.rows import Clocks
from attnbench.results.atomic import write_text_atomic
from attnbench.results.files import read_table
from attnbench.results.schema import HexInt, column_types

INTERVAL_S = 0.25
# NVML's clock event (throttle) reasons that slow a running kernel; idle, application clocks and
# sync boost are not the GPU holding back a kernel
THROTTLE = {0x4: "sw_power_cap", 0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal",
            0x80: "hw_power_brake"}
BELOW_MAX = 0.95  # a median SM clock under this share of the maximum flags the row
SMI_FIELDS = "clocks.sm,clocks.mem,temperature.gpu,power.draw,{reasons}"
REASON_FIELDS = ("clocks_event_reasons.active", "clocks_throttle_reasons.active")  # new name, then old


@dataclass(frozen=True)
class Sample:
    time_unix: float
    sm_clock_mhz: float
    mem_clock_mhz: float
    temp_c: float
    power_w: float
    reasons: int


# telemetry.csv's columns (Sampler.write): a Sample's fields, the reasons in hex, and the source
TELEMETRY_TYPES = column_types(Sample, reasons=HexInt, source=str)


def read_telemetry(path: Path) -> tuple[list[str], list[dict]]:
    """A run's telemetry.csv, header and rows as text, once every column holds what Sampler.write writes."""
    return read_table(path, TELEMETRY_TYPES, required=tuple(TELEMETRY_TYPES))


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:  # "[N/A]", "[Not Supported]"
        return math.nan


def parse_smi_line(line: str, when: float) -> Sample | None:
    """'1980, 2619, 35, 120.5, 0x0000000000000004' -> Sample; None for a line that is not one."""
    parts = [p.strip() for p in line.split(",")]
    if len(parts) != 5:
        return None
    try:
        reasons = int(parts[4], 16)
    except ValueError:
        reasons = 0
    return Sample(when, *(_number(p) for p in parts[:4]), reasons)


def reason_names(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE.items() if mask & bit]


class SourceLost(Exception):
    """A telemetry source stopped answering mid-run (NVML failed, nvidia-smi could not be read)."""


class Sampler:
    """Samples the GPU in a background thread; a Sampler with no source samples nothing."""

    def __init__(self, source=None, max_sm_mhz: float = math.nan, name: str = ""):
        self.source, self.max_sm_mhz, self.name = source, max_sm_mhz, name
        self.samples: list[Sample] = []
        self.lost = ""  # why the source stopped before the run ended ("" while it samples)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> Sampler:
        if self.source is not None:
            self._thread = threading.Thread(target=self._run, name="attnbench-telemetry", daemon=True)
            self._thread.start()
        return self

    def _run(self) -> None:
        try:
            for sample in self.source(self._stop):
                self.samples.append(sample)
        except SourceLost as exc:  # the run goes on without clocks; rows timed after it say why
            self.lost = str(exc)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def window(self, start: float, end: float) -> list[Sample]:
        """Samples from one interval before start to one after end (a short row still gets one)."""
        return [s for s in list(self.samples) if start - INTERVAL_S <= s.time_unix <= end + INTERVAL_S]

    def annotate(self, row: dict) -> dict:
        """The row with its clocks while it was timed; the private `_window` key removed."""
        window = row.pop("_window", None)
        seen = self.window(*window) if window else []
        if seen:
            row.update(summarize(seen, self.max_sm_mhz))
        elif window and self.lost:
            row["clock_flag"] = f"no telemetry: {self.lost}"
        return row

    def write(self, out_dir: Path) -> Path | None:
        """telemetry.csv in the run directory (appended to: a resumed run keeps the earlier samples)."""
        if not self.samples:
            return None
        path = out_dir / "telemetry.csv"
        old = path.read_text() if path.is_file() and not path.is_symlink() else ""
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        if not old:
            writer.writerow([*(f.name for f in fields(Sample)), "source"])
        writer.writerows([*astuple(s)[:-1], f"{s.reasons:#x}", self.name] for s in self.samples)
        write_text_atomic(path, old + buffer.getvalue())
        return path


def summarize(samples: list[Sample], max_sm_mhz: float) -> dict:
    """Per-row telemetry columns from the samples seen while the row was timed."""
    def finite(values):
        return [v for v in values if not math.isnan(v)]

    sm, mem = finite(s.sm_clock_mhz for s in samples), finite(s.mem_clock_mhz for s in samples)
    temps, power = finite(s.temp_c for s in samples), finite(s.power_w for s in samples)
    mask = 0
    for s in samples:
        mask |= s.reasons
    reasons = reason_names(mask)
    flags = ["throttled"] if reasons else []
    if sm and not math.isnan(max_sm_mhz) and statistics.median(sm) < BELOW_MAX * max_sm_mhz:
        flags.append("below max clock")
    return asdict(Clocks(sm_clock_min_mhz=min(sm) if sm else math.nan,
                         sm_clock_median_mhz=statistics.median(sm) if sm else math.nan,
                         mem_clock_median_mhz=statistics.median(mem) if mem else math.nan,
                         gpu_temp_max_c=max(temps) if temps else math.nan,
                         power_max_w=max(power) if power else math.nan,
                         throttle_reasons="+".join(reasons), clock_flag="; ".join(flags)))


# ---- sources ----------------------------------------------------------------------------------------

def _smi(args: list[str], timeout: float = 10.0) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None


def smi_sampler(gpu_ids: list[str], interval_s: float = INTERVAL_S) -> Sampler:
    """A Sampler over one streaming nvidia-smi, once a one-shot query with these fields worked."""
    if shutil.which("nvidia-smi") is None:
        return Sampler()
    for gpu in gpu_ids:
        for reasons in REASON_FIELDS:
            query = SMI_FIELDS.format(reasons=reasons)
            probe = _smi([f"--query-gpu={query},clocks.max.sm", "--format=csv,noheader,nounits", "-i", gpu])
            lines = probe.stdout.strip().splitlines() if probe is not None and probe.returncode == 0 else []
            first = parse_smi_line(lines[0].rsplit(",", 1)[0], 0.0) if lines else None
            if first is None:
                continue
            max_sm = _number(lines[0].rsplit(",", 1)[1].strip())
            command = ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", gpu,
                       "-lms", str(max(1, round(interval_s * 1000)))]
            return Sampler(lambda stop, c=command: _stream(c, stop), max_sm, "nvidia-smi")
    return Sampler()


def _stream(command: list[str], stop: threading.Event) -> Iterator[Sample]:
    try:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    except OSError as exc:
        raise SourceLost(f"nvidia-smi could not be started ({exc.strerror or exc})") from None
    watcher = threading.Thread(target=lambda: (stop.wait(), process.terminate()), daemon=True)
    watcher.start()
    try:
        for line in process.stdout:
            sample = parse_smi_line(line, time.time())
            if sample is not None:
                yield sample
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceLost(f"nvidia-smi's output could not be read ({exc})") from None
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()


def nvml_sampler(uuid: str | None, index: int, interval_s: float = INTERVAL_S) -> Sampler | None:
    """A Sampler polling NVML (pynvml / nvidia-ml-py), or None when NVML is not there."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = (pynvml.nvmlDeviceGetHandleByUUID(uuid) if uuid else pynvml.nvmlDeviceGetHandleByIndex(index))
        sm, mem = getattr(pynvml, "NVML_CLOCK_SM", 1), getattr(pynvml, "NVML_CLOCK_MEM", 2)
        max_sm = float(pynvml.nvmlDeviceGetMaxClockInfo(handle, sm))
        reasons = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    except Exception:
        return None

    def read(stop: threading.Event) -> Iterator[Sample]:
        while not stop.is_set():
            try:
                sample = Sample(time.time(), float(pynvml.nvmlDeviceGetClockInfo(handle, sm)),
                                float(pynvml.nvmlDeviceGetClockInfo(handle, mem)),
                                float(pynvml.nvmlDeviceGetTemperature(handle, getattr(pynvml, "NVML_TEMPERATURE_GPU", 0))),
                                pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0, int(reasons(handle)))
            except pynvml.NVMLError as exc:  # e.g. the GPU fell off the bus, or the driver was reloaded
                raise SourceLost(f"NVML stopped answering ({exc})") from None
            yield sample
            stop.wait(interval_s)

    return Sampler(read, max_sm, "nvml")


def start_sampler(device: str) -> Sampler:
    """A started Sampler for the run's device: NVML, else nvidia-smi, else one that samples nothing."""
    if not device.startswith("cuda"):
        return Sampler()
    try:
        import torch

        index = torch.cuda.current_device() if device == "cuda" else int(device.split(":")[1])
        uuid = str(getattr(torch.cuda.get_device_properties(index), "uuid", "") or "")
    except Exception:
        index, uuid = 0, ""
    gpu_uuid = f"GPU-{uuid}" if uuid and not uuid.startswith("GPU-") else uuid
    ids = [i for i in (gpu_uuid, None if os.environ.get("CUDA_VISIBLE_DEVICES") else str(index)) if i]
    sampler = nvml_sampler(gpu_uuid or None, index) or smi_sampler(ids)
    return sampler.start()


@contextmanager
def gpu_telemetry(device: str, out_dir: Path | None) -> Iterator[Sampler]:
    """Sample while the body runs; then write telemetry.csv into out_dir (when anything was seen)."""
    sampler = start_sampler(device)
    try:
        yield sampler
    finally:
        sampler.stop()
        if out_dir is not None:
            try:
                sampler.write(out_dir)
            except OSError:
                pass
