"""What an e2e run keeps in its directory while it runs: its rows and agreements, rewritten
atomically after each point, and the agreements a `--resume` reads back.

Apart from runs/e2e.py (the job) so that the job reads as its steps; the files' formats are
results/files.py's.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from attnbench.e2e.rows import E2E_POINT
from attnbench.errors import AttnbenchError, UsageError
from attnbench.results.atomic import replace_atomic
from attnbench.results.files import read_agreements
from attnbench.runs.rundir import ResumeKey, RunDir

KEY = ResumeKey(tuple(E2E_POINT), ("backend", "strategy"))  # finished with every backend x strategy


def point_key(values: dict) -> tuple[str, ...]:
    return KEY.of(values)


def save_table(rows: list[dict], path: Path) -> None:
    replace_atomic(path, lambda tmp: pd.DataFrame(rows).to_csv(tmp, index=False))


def save_rows(run: RunDir, rows: list[dict], agreements: list[dict]) -> None:
    """results.csv and agreement.csv, rewritten atomically with every row so far."""
    run.record(run.path / "results.csv")
    save_table(rows, run.path / "results.csv")
    if agreements:
        run.record(run.path / "agreement.csv")
        save_table(agreements, run.path / "agreement.csv")


def previous_agreements(out_dir: Path) -> list[dict]:
    """The agreement rows of the run being resumed, checked as every reader checks them."""
    try:
        return read_agreements(out_dir / "agreement.csv")
    except AttnbenchError as exc:
        raise UsageError(f"--resume: {exc}") from None


def model_env(margs, path: Path | None, args, dtype_name: str, max_model_len: int) -> dict:
    """env.json's `e2e` part every e2e run has: the model, its weights, precision and cache."""
    return {"model": margs.name, "model_args": dict(vars(margs)), "params_b": margs.num_params / 1e9,
            "weights": f"checkpoint {path}" if path else f"random (seed {args.seed})",
            "dtype": dtype_name, "block_size": args.block_size, "chunk_size": args.chunk_size,
            "max_model_len": max_model_len}
