"""Bad input around vllm-triton: asking for it where it cannot run is one `error:` line that says why
(exit 1, no traceback, nothing written), for each command that takes --backend; and the pack
builder refuses a wheel that is not there or lacks the kernel's files, leaving no pack behind."""

from __future__ import annotations

import os
import subprocess
import zipfile
from pathlib import Path

import pytest
import torch
from bad_input_cli import E2E, KERNEL, assert_one_error_line, invoke

ROOT = Path(__file__).resolve().parent.parent
KERNEL_CPU = [a if a != "reference" else "vllm-triton" for a in KERNEL]
VERIFY = ["verify", "--backend", "vllm-triton", "--heads", "4", "--kv-heads", "2", "--dim", "32", "--device", "cpu"]


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where no GPU is visible")
@pytest.mark.parametrize("command", [KERNEL_CPU, VERIFY, [*E2E, "--backend", "vllm-triton"]],
                         ids=["kernel", "verify", "e2e"])
def test_vllm_triton_without_a_gpu_is_one_error_line(command, tmp_path):
    out = tmp_path / "run"
    line = assert_one_error_line(invoke(*command, "--out", out), "vllm-triton")
    assert "vllm-triton" in line and not out.exists()


@pytest.mark.parametrize("wheel", ["missing.whl", "empty.whl"])
def test_the_pack_builder_refuses_a_wheel_without_the_kernel_and_writes_nothing(wheel, tmp_path):
    if wheel == "empty.whl":
        with zipfile.ZipFile(tmp_path / wheel, "w") as z:
            z.writestr("vllm/__init__.py", "")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    done = subprocess.run(["bash", str(ROOT / "scripts/device/prepare_triton.sh"), "--wheel", str(tmp_path / wheel),
                           "--out", str(tmp_path / "pack"), "--no-check"], env=env, capture_output=True, text=True)
    assert done.returncode != 0 and not (tmp_path / "pack").exists() and not (tmp_path / "cache").exists()
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr  # one line that says why, no traceback
