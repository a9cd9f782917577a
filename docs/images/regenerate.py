"""Redraw the pictures shown in docs/guides/results.md from real runs, with `attnbench plot` itself.

Each kind of run is optional; the kernel and replay pictures come from the shipped H200 examples,
which redraw on any machine (a CPU one included), the e2e ones need an e2e run:

    python docs/images/regenerate.py --kernel results/examples/h200-fa2-gqa-graph \
        --replay results/examples/h200-replay-chat-high [--e2e E2E_RUN]

Each PNG is written by `attnbench plot RUN --out <a temporary directory>`, then reduced to a
128-colour palette (Pillow, which matplotlib installs) so that each stays small in the repository.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image

HERE = Path(__file__).resolve().parent
# (picture in docs/images/, the glob of the PNG `attnbench plot` writes for that kind of run)
KERNEL = [("kernel-latency.png", "latency_*.png"), ("kernel-ratio.png", "ratio_*.png")]
E2E = [("e2e-latency.png", "e2e_latency.png"), ("e2e-ratio.png", "e2e_ratio.png")]
REPLAY = [("replay-speedup-cdf-h200.png", "replay_speedup_cdf.png")]


def redraw(run: Path, pictures: list[tuple[str, str]]) -> None:
    with tempfile.TemporaryDirectory(prefix="attnbench-docs-") as tmp:
        out = Path(tmp) / "plots"
        subprocess.run([sys.executable, "-m", "attnbench", "plot", str(run), "--out", str(out)], check=True)
        for name, pattern in pictures:
            drawn = sorted(out.glob(pattern))
            if not drawn:
                raise SystemExit(f"{run}: attnbench plot drew no {pattern}")
            image = Image.open(drawn[0]).convert("RGB").quantize(colors=128)
            image.save(HERE / name, optimize=True)
            print(f"{HERE / name}: {(HERE / name).stat().st_size // 1024} KiB, from {drawn[0].name} of {run}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="Redraw docs/images/ from runs with `attnbench plot`.")
    for flag in ("kernel", "e2e", "replay"):
        parser.add_argument(f"--{flag}", type=Path, help=f"a {flag} run to draw the {flag} pictures from")
    given = parser.parse_args()
    runs = [(run, pictures) for run, pictures in ((given.kernel, KERNEL), (given.e2e, E2E), (given.replay, REPLAY)) if run]
    if not runs:
        parser.error("give at least one of --kernel, --e2e, --replay")
    for run, pictures in runs:
        redraw(run, pictures)
