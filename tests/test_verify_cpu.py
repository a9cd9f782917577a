"""`attnbench verify` on the CPU: what it judges (the reference, eagerly, against float64), what it
refuses and why, the honest count, its exit statuses, and its memory check.

Issue 20: `verify --device cpu` ran the reference's graph replays (12 of 12 FAIL: a backend that
reads lengths at plan time cannot replay), printed "0 failure(s)" and exited 0; `--backend flex`
was all unsupported and exited 0. The float64 attention is checked here against the tests' own
oracle (conftest.naive_attention), so its verdicts mean something.
"""

from __future__ import annotations

import csv

import pytest
import torch
from conftest import naive_attention, page_kv, rel_l2
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.kernels import verify as verify_job
from attnbench.kernels.backends import registry
from attnbench.kernels.backends.reference import ReferenceBackend
from attnbench.kernels.oracle64 import float64_attention
from attnbench.kernels.workload import Batch, SweepPoint

TINY = ["--heads", "4", "--kv-heads", "2", "--dim", "32", "--contexts", "16,80"]
POINT = SweepPoint(kind="mixed", num_tokens=4, num_heads=4, num_kv_heads=2, head_dim=32)
CPU = torch.device("cpu")


def invoke(*args: str):
    return CliRunner().invoke(app, ["verify", "--device", "cpu", *args], env={"COLUMNS": "200"})


class Halved(ReferenceBackend):
    """Not graph-safe, and wrong: its varlen launch halves the output."""

    name = "fake-halved"
    oracle = False

    def plan_varlen(self, ctx, md):
        launch = super().plan_varlen(ctx, md)

        def halved(q, k_cache, v_cache, out):
            launch(q, k_cache, v_cache, out)
            out.mul_(0.5)
        return halved


@pytest.fixture
def wrong_backend(monkeypatch):
    monkeypatch.setitem(registry.REGISTRY, Halved.name, Halved())


@pytest.mark.parametrize("causal", [True, False])
def test_the_float64_attention_agrees_with_the_tests_oracle(causal, cpu_generator):
    query_lens, kv_lens = (1, 1, 6, 12), (17, 64, 6, 40)
    q = torch.randn(sum(query_lens), 4, 32, generator=cpu_generator)
    keys = [torch.randn(kv, 2, 32, generator=cpu_generator) for kv in kv_lens]
    values = [torch.randn(kv, 2, 32, generator=cpu_generator) for kv in kv_lens]
    k_cache, v_cache, table = page_kv(keys, values, 16, cpu_generator)
    batch = Batch(query_lens, kv_lens, (True, True, False, False))
    got = float64_attention(q, k_cache, v_cache, batch, table, causal, 32 ** -0.5)
    assert rel_l2(got, naive_attention(q, keys, values, list(query_lens), causal, 32 ** -0.5)) < 1e-12


def test_the_reference_runs_eagerly_once_per_case_and_passes(tmp_path):
    result = invoke(*TINY, "--out", str(tmp_path / "v"))
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(open(tmp_path / "v" / "verify.csv")))
    assert [(r["strategy"], r["policy"], r["verdict"]) for r in rows] == [
        (s, "eager", "pass") for s in ("unified", "split") for _ in range(3)]
    assert "6 case(s) judged: 6 pass, 0 FAIL" in result.output and "CPU run" not in result.output


def test_without_contexts_the_cpu_scales_them_and_says_so_in_one_line():
    result = invoke("--heads", "4", "--kv-heads", "2", "--dim", "32", "--strategy", "unified")
    assert result.exit_code == 0, result.output
    notice = [line for line in result.output.splitlines() if "CPU run" in line]
    assert len(notice) == 1 and "--contexts 64,256" in notice[0] and "512,4096" in notice[0]


def test_a_wrong_backend_fails_its_eager_cases_counts_them_and_exits_1(wrong_backend):
    result = invoke(*TINY, "--backend", f"reference,{Halved.name}", "--strategy", "unified")
    assert result.exit_code == 1, result.output
    assert "6 case(s) judged: 3 pass, 3 FAIL (3 fail verify" in result.output
    assert result.output.count(f"FAIL {Halved.name} unified eager") == 3


def test_nothing_judgeable_is_refused_in_one_line_and_nothing_is_written(tmp_path):
    result = invoke(*TINY, "--backend", "flex", "--out", str(tmp_path / "v"))
    assert result.exit_code == 1 and "nothing verify can judge here" in result.output
    assert "graph_replay='none'" in result.output and not (tmp_path / "v").exists()


def test_cases_outside_a_backend_are_one_line_each_group_and_the_rest_runs():
    result = invoke(*TINY, "--backend", "reference,flex", "--strategy", "unified")
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("not run:")]
    assert len(lines) == 1 and "flex unified" in lines[0] and "3 case(s) judged: 3 pass" in result.output


def test_the_count_line_counts_every_fail_and_says_which_gate():
    rows = [{"verdict": "FAIL", "gates": False}, {"verdict": "FAIL", "gates": True}, {"verdict": "pass", "gates": False},
            {"verdict": "unsupported", "gates": False}]
    assert verify_job.counts_line(rows) == ("3 case(s) judged: 1 pass, 2 FAIL (1 fail verify, exit 1 if any; 1 "
                                            "naive-policy finding(s), the seed PR bug); 1 not run (skipped or "
                                            "unsupported).")


def test_a_case_that_does_not_fit_is_skipped_with_its_need_and_the_rest_runs(monkeypatch):
    cases = verify_job.replay_cases(16, 4096, 4)
    needs = [verify_job.case_need(POINT, c, CPU, eager=True) for c in cases]
    free = sorted(needs)[1]  # the smaller two fit
    rows = verify_job.plan_rows(["reference"], ["unified"], ["safe"], POINT, cases, CPU, free=free)
    skipped = [r for r in rows if r["verdict"] == "skipped"]
    assert [r["case"] for r in skipped] == ["short -> long context"] and "GiB available on the CPU" in skipped[0]["reason"]
    assert [r["verdict"] for r in verify_job.run_rows(rows, POINT, cases, CPU)].count("pass") == 2


def test_a_verify_that_fits_nowhere_is_refused_before_it_runs(monkeypatch, tmp_path):
    monkeypatch.setattr("attnbench.kernels.inputs.available_host_bytes", lambda: 1024)
    result = invoke(*TINY, "--out", str(tmp_path / "v"))
    assert result.exit_code == 1 and "nothing verify can judge here" in result.output and "needs ~" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "v").exists()


def test_the_doctor_interface_still_replays_graph_safe_backends_under_safe():
    """runs/doctor.py calls verify_rows([name], strategies, ["safe"], point, cases, device)."""
    rows = verify_job.verify_rows(["reference"], ["unified"], ["safe"], POINT, verify_job.replay_cases(16, 80), CPU)
    assert {r["policy"] for r in rows} == {"eager"} and not verify_job.gating_failures(rows)
