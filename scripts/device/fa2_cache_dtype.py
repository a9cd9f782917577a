"""Keeps only one dtype's kernels in the FA2 JIT cache that ../shared/device/prepare.sh puts in
.device/ (nvcache-fa2-h200.tar.xz: the driver's compiled FA2 kernels, bf16 and fp16, head dims 64
and 128), so that .device, .device-fi, .device-triton and the tree fit the device tool's 64 MiB
carry together: the bf16 half is about 5 MB of the 10.

    python3 scripts/device/fa2_cache_dtype.py [--keep bf16|fp16] [--pack .device/nvcache-fa2-h200.tar.xz]

An entry of the cache is one compiled module; its kernels' mangled names say their element type
(cutlass::bfloat16_t or cutlass::half_t). Entries of the other type are left out, the index and
the folders kept: the driver compiles a missing kernel on first use (1-2 minutes a module), so
fp16 runs still work, slower to start. The pack is replaced (a new file moved over it, so a
failure leaves it whole; a symlink is refused); prepare.sh makes the whole one again.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tarfile
from pathlib import Path

MARKERS = {"bf16": b"bfloat16_t", "fp16": b"half_t"}


def entry_dtype(data: bytes) -> str | None:
    """The element type an entry's kernels name, or None when it names neither or both."""
    found = {name for name, marker in MARKERS.items() if marker in data}
    return found.pop() if len(found) == 1 else None


def trim(pack: Path, keep: str) -> tuple[int, int]:
    """Rewrite `pack` with only `keep`'s entries (and every entry of no single type); (kept, dropped)."""
    kept = dropped = 0
    out = io.BytesIO()
    with tarfile.open(pack, "r:xz") as src, tarfile.open(fileobj=out, mode="w:xz") as dst:
        for member in src:
            data = src.extractfile(member).read() if member.isfile() else None
            if data is not None and entry_dtype(data) not in (keep, None):
                dropped += 1
                continue
            kept += member.isfile()
            dst.addfile(member, io.BytesIO(data) if data is not None else None)
    partial = pack.with_name(pack.name + ".partial")
    partial.write_bytes(out.getvalue())
    os.replace(partial, pack)
    return kept, dropped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", choices=sorted(MARKERS), default="bf16")
    parser.add_argument("--pack", type=Path, default=Path(".device/nvcache-fa2-h200.tar.xz"))
    args = parser.parse_args()
    if not args.pack.is_file() or args.pack.is_symlink():
        sys.exit(f"error: --pack {args.pack}: no such file (run ../shared/device/prepare.sh first)")
    before = args.pack.stat().st_size
    try:
        kept, dropped = trim(args.pack, args.keep)
    except (tarfile.TarError, OSError, EOFError) as exc:
        sys.exit(f"error: --pack {args.pack}: not a readable xz tar ({exc})")
    print(f"{args.pack}: kept {kept} file(s), dropped {dropped} {'fp16' if args.keep == 'bf16' else 'bf16'} "
          f"module(s); {before / 2**20:.1f} -> {args.pack.stat().st_size / 2**20:.1f} MiB")


if __name__ == "__main__":
    main()
