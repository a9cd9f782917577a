"""Unpacks FlashInfer and tvm-ffi wheels into a site folder and keeps only what attention needs.

Why it exists: the GPU machine has no package registry and carries at most 64 MiB with the tree,
and a flashinfer-python 0.7.x wheel is 62-101 MB (MoE, GEMM, comm and experimental sources). Used by
prepare_flashinfer07.sh; the shared 0.6.6 pack (shared/device/prepare_flashinfer.sh) prunes the same way.

Kept: all of flashinfer's Python (`import flashinfer` imports every submodule), the vendored CCCL
whole (0.7.x puts it before the toolkit's on the include path, so a partial copy would mix two
CCCL versions), and of the other C++/CUDA sources only those the attention modules' JIT sources
reach by #include (csrc/{batch_decode,batch_prefill*,single_*,pod,batch_pod,batch_attention,page,
cascade,quantization}*, FA2 and FA3/sm90). Nothing is stubbed: other ops import but cannot compile.
Of the Python, two packages that `import flashinfer` 0.7.2.post1 does not import and the attention
wrappers do not use are dropped (DROPPED: 39 MB of MoE-EP and model-specific experimental kernels,
two thirds of the packed Python); a module the trace below shows imported stays. tvm-ffi loses its
C++ sources, 3rdparty/ and cmake files. Usage: fi_pack.py SITE WHEEL...
"""

import os
import re
import shutil
import stat
import sys
import zipfile
from pathlib import Path

ATTENTION = re.compile(r"^(batch_decode(?!_mla)|batch_prefill|single_decode|single_prefill|pod|batch_pod|"
                       r"batch_attention|page\.cu|flashinfer_page_binding|cascade\.cu|"
                       r"flashinfer_cascade_binding|quantization\.cu|flashinfer_quantization_binding)")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
PRUNED = ("include", "csrc", "cutlass", "spdlog")  # data/ folders cut to what the includes reach
# Python not imported by `import flashinfer` 0.7.2.post1 (python -X importtime): moe_ep, and every
# experimental package but the one its __init__ imports
DROPPED = ("moe_ep", "experimental/*")
IMPORTED = ("experimental/__init__.py", "experimental/cake_nvfp4_per_token")


def extract(site: Path, wheels: list[str]) -> None:
    """Unzip the wheels into site, keeping executable bits."""
    for whl in wheels:
        with zipfile.ZipFile(whl) as z:
            for info in z.infolist():
                z.extract(info, site)
                mode = (info.external_attr >> 16) & 0o777
                if mode and not stat.S_ISDIR(info.external_attr >> 16):
                    os.chmod(site / info.filename, mode)
    for p in ["build_backend.py", "build_utils.py"]:  # flashinfer's build helpers, at the top level
        (site / p).unlink(missing_ok=True)


def prune_tvm_ffi(site: Path) -> None:
    for name in ["3rdparty", "src", "share", "CMakeLists.txt"]:  # (core.so needs lib/)
        p = site / "tvm_ffi" / name
        shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)


def prune_python(fi: Path) -> None:
    for pattern in DROPPED:
        for p in fi.glob(pattern):
            if not any(p == fi / keep for keep in IMPORTED):
                shutil.rmtree(p) if p.is_dir() else p.unlink()


def reached(data: Path) -> tuple[set[Path], set[str]]:
    """The data/ files the attention sources #include, transitively, and the names left to others."""
    search = [data / "cccl" / "cub", data / "cccl" / "libcudacxx" / "include", data / "cccl" / "thrust",
              data / "include", data / "csrc", data / "cutlass" / "include",
              data / "cutlass" / "tools" / "util" / "include", data / "spdlog" / "include"]
    todo = [p for p in (data / "csrc").iterdir() if p.is_file() and (ATTENTION.match(p.name) or p.suffix == ".h")]
    todo += [data / "include" / "flashinfer" / "attention" / "variants.cuh",
             data / "include" / "flashinfer" / "attention" / "hopper" / "variants.cuh"]
    keep: set[Path] = set()
    external: set[str] = set()
    while todo:
        f = todo.pop()
        if f in keep:
            continue
        keep.add(f)
        if f.is_relative_to(data / "cccl"):
            continue  # kept whole
        for kind, name in INCLUDE.findall(f.read_text(errors="replace")):
            found = [d / name for d in ([f.parent] if kind == '"' else []) + search if (d / name).is_file()]
            if found:
                todo.append(Path(os.path.normpath(found[0])))
            else:
                external.add(name)
    return keep, external


def prune_data(data: Path) -> None:
    keep, external = reached(data)
    kept = {p.relative_to(data) for p in keep}
    removed = 0
    for p in sorted(data.rglob("*"), reverse=True):
        rel = p.relative_to(data)
        if p.is_file() and rel.parts[0] in PRUNED and rel not in kept:
            p.unlink()
            removed += 1
        elif p.is_dir() and not any(p.iterdir()):
            p.rmdir()
    print(f"kept {len(kept)} C++/CUDA files reached from the attention sources (and cccl/ whole), removed "
          f"{removed}; includes left to the toolkit, tvm-ffi or the system: {len(external)}")


def main(site: Path, wheels: list[str]) -> None:
    extract(site, wheels)
    prune_tvm_ffi(site)
    prune_python(site / "flashinfer")
    prune_data(site / "flashinfer" / "data")
    for p in list(site.rglob("__pycache__")):
        shutil.rmtree(p)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
