"""Redraw the pictures shown in docs/guides/results.md from real runs, with `attnbench plot` itself.

The committed ones come from CPU runs (pipeline demos); on a GPU machine, rerun this with a kernel
run made with --replicates 3 and an e2e run, and commit the result:

    python docs/images/regenerate.py KERNEL_RUN E2E_RUN

Each PNG is written by `attnbench plot RUN --out <a temporary directory>`, then reduced to a
128-colour palette (Pillow, which matplotlib installs) so that each stays small in the repository.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from PIL import Image

HERE = Path(__file__).resolve().parent
# (picture in docs/images/, the glob of the PNG `attnbench plot` writes for that kind of run)
KERNEL = [("kernel-latency.png", "latency_*.png"), ("kernel-ratio.png", "ratio_*.png")]
E2E = [("e2e-latency.png", "e2e_latency.png"), ("e2e-ratio.png", "e2e_ratio.png")]


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
    if len(sys.argv) != 3:
        raise SystemExit("usage: python docs/images/regenerate.py KERNEL_RUN E2E_RUN")
    redraw(Path(sys.argv[1]), KERNEL)
    redraw(Path(sys.argv[2]), E2E)
