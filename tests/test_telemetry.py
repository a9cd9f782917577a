"""GPU telemetry without a GPU: a fake nvidia-smi on PATH (streaming, and one that knows only the
old throttle field), a fake NVML module, and the paths where there is nothing to sample (the CPU,
no nvidia-smi), which must cost nothing and raise nothing."""

from __future__ import annotations

import math
import sys
import time
import types

import pytest

from attnbench.results import telemetry

# one line per 50 ms while looping (-lms), or one line with clocks.max.sm for the probe; a field
# list with clocks_event_reasons fails as an old driver's would when OLD_DRIVER is set
FAKE_SMI = """#!/bin/sh
case "$*" in
  *clocks_event_reasons*) if [ -n "$OLD_DRIVER" ]; then echo "Field is not a valid field to query." >&2; exit 2; fi ;;
esac
case "$*" in
  *-lms*) while true; do echo "1500, 2619, 61, 650.25, 0x0000000000000004"; sleep 0.05; done ;;
  *) echo "1500, 2619, 61, 650.25, 0x0000000000000004, 1980" ;;
esac
"""


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    path = tmp_path / "bin" / "nvidia-smi"
    path.parent.mkdir()
    path.write_text(FAKE_SMI)
    path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{path.parent}:/usr/bin:/bin")
    return path


def sample_for(sampler: telemetry.Sampler, seconds: float = 0.4) -> list[telemetry.Sample]:
    sampler.start()
    time.sleep(seconds)
    sampler.stop()
    return sampler.samples


@pytest.mark.parametrize("old_driver", [False, True], ids=["clocks_event_reasons", "clocks_throttle_reasons"])
def test_a_streaming_nvidia_smi_is_sampled_and_rows_are_flagged(fake_smi, monkeypatch, tmp_path, old_driver):
    if old_driver:
        monkeypatch.setenv("OLD_DRIVER", "1")
    sampler = telemetry.smi_sampler(["0"])
    start = time.time()
    samples = sample_for(sampler)
    assert sampler.name == "nvidia-smi" and sampler.max_sm_mhz == 1980
    assert len(samples) >= 2 and samples[0].sm_clock_mhz == 1500 and samples[0].reasons == 0x4
    row = sampler.annotate({"verdict": "pass", "_window": (start, time.time())})
    assert "_window" not in row
    assert (row["sm_clock_min_mhz"], row["sm_clock_median_mhz"], row["gpu_temp_max_c"]) == (1500, 1500, 61)
    assert row["throttle_reasons"] == "sw_power_cap" and row["clock_flag"] == "throttled; below max clock"
    path = sampler.write(tmp_path)
    lines = path.read_text().splitlines()
    assert lines[0].startswith("time_unix,sm_clock_mhz") and lines[1].endswith(",0x4,nvidia-smi")
    sampler.write(tmp_path)  # a resumed run appends, the header once
    assert len(path.read_text().splitlines()) == 2 * len(samples) + 1


def test_without_nvidia_smi_or_a_gpu_there_is_nothing_and_no_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    assert telemetry.smi_sampler(["0"]).source is None
    with telemetry.gpu_telemetry("cpu", tmp_path) as sampler:
        row = sampler.annotate({"verdict": "pass", "_window": (0.0, 1.0)})
    assert row == {"verdict": "pass"} and not (tmp_path / "telemetry.csv").exists()


def test_nvml_is_used_when_it_imports(monkeypatch):
    calls = []
    fake = types.SimpleNamespace(
        nvmlInit=lambda: calls.append("init"), nvmlDeviceGetHandleByIndex=lambda i: f"gpu{i}",
        nvmlDeviceGetHandleByUUID=lambda u: u, nvmlDeviceGetMaxClockInfo=lambda h, c: 1980,
        nvmlDeviceGetClockInfo=lambda h, c: 1980 if c == 1 else 2619, nvmlDeviceGetTemperature=lambda h, s: 40,
        nvmlDeviceGetPowerUsage=lambda h: 300_000, nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0,
        NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2, NVML_TEMPERATURE_GPU=0)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    sampler = telemetry.nvml_sampler(None, 0, interval_s=0.01)
    samples = sample_for(sampler, 0.1)
    assert sampler.name == "nvml" and calls == ["init"] and samples
    summary = telemetry.summarize(samples, sampler.max_sm_mhz)
    assert summary["power_max_w"] == 300 and summary["clock_flag"] == "" and summary["throttle_reasons"] == ""


def test_nvidia_smi_lines_that_say_not_available_are_not_numbers():
    sample = telemetry.parse_smi_line("[N/A], 2619, 35, [Not Supported], 0x1", 1.0)
    assert math.isnan(sample.sm_clock_mhz) and math.isnan(sample.power_w) and sample.reasons == 1
    assert telemetry.parse_smi_line("garbage", 1.0) is None
    assert telemetry.reason_names(0x1 | 0x2 | 0x10) == []  # idle, application clocks, sync boost: not throttling
    assert telemetry.reason_names(0x8 | 0x40) == ["hw_slowdown", "hw_thermal"]


def test_a_source_lost_mid_run_ends_sampling_and_rows_timed_after_say_why(monkeypatch):
    class NVMLError(Exception):
        pass

    def clock(handle, which):
        if time.time() > lost_at:
            raise NVMLError("GPU is lost")
        return 1980

    lost_at = time.time() + 0.05
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlDeviceGetHandleByIndex=lambda i: f"gpu{i}", nvmlDeviceGetMaxClockInfo=lambda h, c: 1980,
        nvmlDeviceGetClockInfo=clock, nvmlDeviceGetTemperature=lambda h, s: 40, nvmlDeviceGetPowerUsage=lambda h: 300_000,
        nvmlDeviceGetCurrentClocksEventReasons=lambda h: 0, NVMLError=NVMLError)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    sampler = telemetry.nvml_sampler(None, 0, interval_s=0.01).start()
    sampler._thread.join(timeout=5)  # the source stops by itself: the thread ends without stop()
    assert not sampler._thread.is_alive() and sampler.samples
    assert sampler.lost == "NVML stopped answering (GPU is lost)"
    after = time.time() + 10
    row = sampler.annotate({"verdict": "pass", "_window": (after, after + 1)})
    assert row["clock_flag"] == "no telemetry: NVML stopped answering (GPU is lost)" and "sm_clock_min_mhz" not in row
    before = sampler.annotate({"verdict": "pass", "_window": (sampler.samples[0].time_unix,) * 2})
    assert before["clock_flag"] == "" and before["sm_clock_min_mhz"] == 1980


def test_an_nvidia_smi_that_cannot_be_started_is_a_lost_source(tmp_path):
    sampler = telemetry.Sampler(lambda stop: telemetry._stream([str(tmp_path / "no-such-smi")], stop)).start()
    sampler.stop()
    assert sampler.lost.startswith("nvidia-smi could not be started") and not sampler.samples
