"""The FlashInfer refusals follow the installed version: a release known to carry the bug is refused
with its version named, one that fixes it runs (tests with a fake flashinfer whose version is set)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from fake_flashinfer import FakeFlashInfer

from attnbench.kernels.backends.flashinfer import FlashInferBackend
from attnbench.kernels.backends.flashinfer_ba import FlashInferBABackend
from attnbench.kernels.backends.flashinfer_bugs import BUGS
from attnbench.kernels.workload import SweepPoint

CUDA = torch.device("cuda")  # supports() only compares device types: nothing runs on it
BIG = SweepPoint("decode", 700, 12, 64, context="8192")  # past 2^32 K elements (test_flashinfer.py)


def fake(version: str) -> FakeFlashInfer:
    lib = FakeFlashInfer()
    lib.__version__ = version
    return lib


@pytest.mark.parametrize("version, how_pod, how_ba", [
    ("0.6.6", "measured", "measured"),
    ("0.7.2.post1", "measured", "measured"),  # both reproducers ran on it (docs/measurements/h200/kernel.md)
    ("0.7.4", "by reading it", "by reading it"), ("0.7.0", "not read; 0.6.6 and 0.7.4", "not read; 0.6.6 and 0.7.4"),
    ("0.9.0", "not checked", "not checked"), ("0.6.5", "not checked", "not checked"),
    ("nonsense", "not checked", "not checked")])
def test_versions_with_the_bugs_are_refused_naming_the_version(version, how_pod, how_ba):
    pod = FlashInferBackend(fake(version)).graph_refusal("fused")
    ba = FlashInferBABackend(fake(version)).supports(BIG, "unified", CUDA)
    for reason, bug, how in [(pod, "pod-memset", how_pod), (ba, "ba-int32", how_ba)]:
        assert f"flashinfer {version}: " in reason and how in reason and BUGS[bug].report in reason
        assert len(reason) < 400 and "\n" not in reason


def test_a_release_that_fixes_a_bug_runs_and_older_ones_stay_refused(monkeypatch):
    for name in BUGS:
        monkeypatch.setitem(BUGS, name, dataclasses.replace(BUGS[name], fixed_in="0.8.0"))
    for version in ("0.8.0", "0.8.1.post2", "1.0.0"):
        assert FlashInferBackend(fake(version)).graph_refusal("fused") is None
        assert FlashInferBABackend(fake(version)).supports(BIG, "unified", CUDA) is None
        assert FlashInferBABackend(fake(version)).cache_refusal(2**40) is None
    for version in ("0.7.4", "0.8.0rc1"):  # a release candidate comes before its release
        assert "pod.cuh" in FlashInferBackend(fake(version)).graph_refusal("fused")
        assert "persistent.cuh" in FlashInferBABackend(fake(version)).cache_refusal(2**32 + 1)


def test_the_limit_is_2_32_elements_and_other_strategies_are_not_touched():
    ba = FlashInferBABackend(fake("0.7.2.post1"))
    assert ba.cache_refusal(2**32) is None and "spans 4,294,967,297 K elements" in ba.cache_refusal(2**32 + 1)
    assert FlashInferBackend(fake("0.7.2.post1")).graph_refusal("unified") is None
    assert FlashInferBackend(fake("0.7.2.post1")).supports(BIG, "unified", CUDA) is None
