"""benchmarks/ab_power.py reads each run's sampling window from its command and refuses a folder
whose runs sampled at different --budget-ms: a row's per-round spread depends on the window, so
one window's noise must not be simulated as another's (CPU, instant)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import ab_power  # noqa: E402


def ab_run(path: Path, extra: str) -> Path:
    path.mkdir(parents=True)
    command = f"attnbench ab --baseline A=1 --candidate A=2 --out {path} --scenario s.toml --backend vllm-fa2 {extra}"
    (path / "env.json").write_text(json.dumps({"command": command.strip()}))
    (path / "rounds.csv").write_text("side,round\n")
    return path


def test_the_window_is_the_command_s_or_ab_s_default(tmp_path):
    assert ab_power.window_ms(ab_run(tmp_path / "a", "--budget-ms 100")) == 100.0
    assert ab_power.window_ms(ab_run(tmp_path / "b", "")) == 1000.0


def test_runs_of_two_windows_are_refused(tmp_path, monkeypatch, capsys):
    ab_run(tmp_path / "aa", "--budget-ms 100")
    ab_run(tmp_path / "planted-3", "--budget-ms 1000")
    monkeypatch.setattr(sys, "argv", ["ab_power.py", str(tmp_path)])
    with pytest.raises(SystemExit) as stopped:
        ab_power.main()
    assert "different --budget-ms (100, 1000)" in str(stopped.value)
