"""Shared by the e2e GPU tests (test_e2e, test_e2e_graphs, test_e2e_piecewise): which kernel
backends they run, each skipped with its reason where it cannot run, and the tiny-model CLI run
whose rows and agreement they check under a CUDA graph mode."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from attnbench.cli.main import app
from attnbench.kernels.backends.registry import get_backend


def backend_params(*names: str) -> list:
    """pytest params for these backends, each skipped with its unavailable_reason."""
    return [pytest.param(name, id=name, marks=pytest.mark.skipif(
        get_backend(name).unavailable_reason() is not None,
        reason=f"{name} unavailable: {get_backend(name).unavailable_reason()}")) for name in names]


def cli_graph_run(backend: str, cudagraph: str, tmp_path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """`attnbench e2e` on the tiny model (prompts of 24 in 16-token chunks, batch 1 and 3) under
    `--cudagraph cudagraph`: its results.csv and agreement.csv, once it exited 0."""
    out = tmp_path / "run"
    result = CliRunner().invoke(app, ["e2e", "--model", "tiny", "--warmup", "1", "--iters", "2", "--input-len", "24",
                                      "--output-len", "8", "--batch-size", "1,3", "--chunk-size", "16",
                                      "--backend", backend, "--cudagraph", cudagraph, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return pd.read_csv(out / "results.csv"), pd.read_csv(out / "agreement.csv")
