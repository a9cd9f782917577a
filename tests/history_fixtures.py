"""A synthetic history for the dashboard tests: many runs made on the CPU in well under a second.

Each run is the shipped H200 example's results.csv (results/examples/h200-fa2-gqa-graph: 12 rows
of vllm-fa2) plus the same rows as `vllm-fa3`, every time scaled by seeded noise of NOISE (a
normal sigma on the log), and an env.json naming its commit, date and GPU. STEP_AT plants a
STEP slowdown from that run on in the vllm-fa2 rows only; the vllm-fa3 rows stay flat, so every
change point the dashboard finds elsewhere is a false one.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import numpy as np
import pandas as pd

EXAMPLE = Path(__file__).resolve().parent.parent / "results" / "examples" / "h200-fa2-gqa-graph"
RUNS, STEP_AT, STEP, NOISE = 50, 30, 0.05, 0.01
OTHER_GPU_RUNS = 6  # a second GPU, flat, so the GPU filter has something to remove
TIMES = ("median_ms", "p10_ms", "p90_ms")
START = dt.datetime(2026, 10, 1, tzinfo=dt.timezone.utc)
DRAW_ALL = """async () => {  // charts are drawn as they come near the viewport: bring each there
    for (const d of document.querySelectorAll('.chart')) {
        if (d.hidden) continue;
        // up to three times 5 s, scrolled away in between: a loaded machine may be slow to report
        // the intersection, and a chart still blank after that is one the test should see as such
        for (let attempt = 0; attempt < 3 && d.dataset.stale !== '0'; attempt++) {
            if (attempt) { window.scrollTo(0, attempt % 2 ? document.body.scrollHeight : 0); await new Promise(r => setTimeout(r, 100)); }
            d.scrollIntoView();
            for (let i = 0; i < 200 && d.dataset.stale !== '0'; i++) await new Promise(r => setTimeout(r, 25));
        }
    }
    window.scrollTo(0, 0);
}"""


def commit_of(i: int) -> str:
    return f"{i:04d}" + "c0ffee" * 6


def base_rows() -> pd.DataFrame:
    rows = pd.read_csv(EXAMPLE / "results.csv", keep_default_na=False)
    return pd.concat([rows, rows.assign(backend="vllm-fa3")], ignore_index=True)


def scaled(rows: pd.DataFrame, factors: np.ndarray) -> pd.DataFrame:
    out = rows.copy()
    for column in TIMES:
        out[column] = rows[column].astype(float) * factors
    out["samples_ms"] = [" ".join(f"{float(x) * f:.6g}" for x in cell.split()) for cell, f in
                         zip(rows["samples_ms"], factors)]
    return out


def write_run(path: Path, rows: pd.DataFrame, commit: str, when: dt.datetime, gpu: str) -> Path:
    path.mkdir(parents=True)
    rows.assign(gpu=gpu).to_csv(path / "results.csv", index=False)
    env = json.loads((EXAMPLE / "env.json").read_text())
    env.update(git_sha=commit, timestamp=when.isoformat(timespec="seconds"), gpu={**env["gpu"], "name": gpu},
               command=f"attnbench run scenarios/seed-kernel-table.toml --out {path.name}")
    (path / "env.json").write_text(json.dumps(env, indent=1))
    return path


def make_runs(root: Path, runs: int = RUNS, step_at: int = STEP_AT, seed: int = 0) -> list[tuple[Path, str, str]]:
    """(run directory, commit, GPU) for every run, oldest first: `runs` on the H200 with the planted
    step, then OTHER_GPU_RUNS flat ones on an H100 (of the first commits)."""
    rng = np.random.default_rng(seed)
    rows = base_rows()
    stepped = (rows["backend"] == "vllm-fa2").to_numpy()
    made = []
    for i in range(runs):
        factors = np.exp(rng.normal(0.0, NOISE, len(rows))) * np.where(stepped & (i >= step_at), 1 + STEP, 1.0)
        commit = commit_of(i)
        made.append((write_run(root / f"h200-{i:03d}", scaled(rows, factors), commit, START + dt.timedelta(hours=i),
                               "NVIDIA H200"), commit, "NVIDIA H200"))
    for i in range(OTHER_GPU_RUNS):
        factors = 1.4 * np.exp(rng.normal(0.0, NOISE, len(rows)))
        commit = commit_of(i)  # the H100 runner measures the first commits too
        made.append((write_run(root / f"h100-{i:03d}", scaled(rows, factors), commit,
                               START + dt.timedelta(hours=i, minutes=30), "NVIDIA H100"), commit, "NVIDIA H100"))
    return made


def make_history(root: Path, **kwargs) -> tuple[Path, list[tuple[Path, str, str]]]:
    """The runs above, filed into root/history."""
    made = make_runs(root / "runs", **kwargs)
    return file_quickly(made, root / "history"), made


def file_quickly(made: list[tuple[Path, str, str]], history: Path) -> Path:
    """The runs filed as `history add` files them, without its full check of each results.csv
    (read.load_run, about 0.3 s a run: tests of `history add` itself run it)."""
    from attnbench.results.files import load_results
    from attnbench.results.history import index_text, new_entry
    from attnbench.results.read import KERNEL, Run
    from attnbench.runs.history import copy_entry

    entries = []
    for path, _, _ in made:
        run = Run(path, path / "results.csv", KERNEL, load_results(path))
        entry = new_entry(run, json.loads((path / "env.json").read_text()), path, None, None)
        copy_entry(path, history, entry)
        entries.append(entry)
    (history / "index.json").write_text(index_text(entries))
    return history
