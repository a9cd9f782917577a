"""Running a test file's Triton kernels under Triton's CPU interpreter, in a child pytest process.

Why a child: TRITON_INTERPRET is read when `import triton` decorates triton's own library functions
(tl.sum's combine), so the interpreted tests need a process started with it. A test file names its
interpreted tests with "interpreted", has them take the `interpreted` fixture, and gets both the
fixture, the parent test that runs them and the GPU tests' `ops` fixture from one line:
`test_under_triton_s_interpreter, interpreted, ops = interpreter_tests(__file__)`.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

INTERPRETING = os.environ.get("TRITON_INTERPRET") == "1"


def run_interpreted(test_file: str) -> None:
    """The file's "interpreted" tests, run under the interpreter: all must pass, none skip."""
    pytest.importorskip("triton", reason="triton is not installed (CI's CPU torch has none): no interpreter run")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", test_file, "-k", "interpreted"],
                            env={**os.environ, "TRITON_INTERPRET": "1"}, capture_output=True, text=True, check=False)
    assert result.returncode == 0 and " passed" in result.stdout and "skipped" not in result.stdout, result.stdout[-4000:]


def interpreted_ops():
    """attnbench.e2e.fused_ops in the interpreter's process; a skip in any other."""
    if not INTERPRETING:
        pytest.skip("run under TRITON_INTERPRET=1 by its file's run_interpreted test")
    return pytest.importorskip("attnbench.e2e.fused_ops", reason="triton does not import")


def interpreter_tests(test_file: str):
    """(the parent test, run where TRITON_INTERPRET is not set; the `interpreted` fixture: fused_ops in
    the interpreter's process, a skip elsewhere; the `ops` fixture of the GPU tests: fused_ops, or a
    skip where triton does not import) for the test module at test_file."""
    @pytest.mark.skipif(INTERPRETING, reason="this is the interpreter's process already")
    def parent():
        run_interpreted(test_file)

    @pytest.fixture(scope="module")
    def interpreted():
        return interpreted_ops()

    @pytest.fixture(scope="module")
    def ops():
        return pytest.importorskip("attnbench.e2e.fused_ops", reason="triton does not import")
    return parent, interpreted, ops
