#!/usr/bin/env bash
# Packs vLLM's unified Triton attention (TRITON_ATTN: vllm/v1/attention/ops/triton_unified_attention.py)
# for a GPU machine that has torch and Triton but no vLLM and no package registry.
#
# Run it from the project's root on a machine with the registry:
#   bash scripts/device/prepare_triton.sh                 # downloads the vllm wheel (about 280 MB), once
#   bash scripts/device/prepare_triton.sh --wheel PATH    # or reads a vllm wheel already downloaded
#   (--out DIR writes the pack elsewhere; --no-check skips importing the kernel from it)
# It writes .device-triton/ (ignored by git, tens of KB): vllm-triton-site.tar.xz and bootstrap.sh.
# A GPU command then carries [".device-triton"] (with ".device" for FA2/FA3) and starts with
#   source .device/bootstrap.sh && source .device-triton/bootstrap.sh && python3 -m attnbench ...
#
# What the pack holds: the pure-Python files of the vllm wheel that the kernel module imports,
# transitively (FILES below, found by importing it and listing what loaded), unmodified; a stub
# vllm/__init__.py (the wheel's imports the whole engine); and one stand-in,
# vllm/platforms/__init__.py = scripts/device/vllm_platforms_shim.py, because vLLM's own picks a
# platform whose module imports the compiled extension (the shim's docstring says what it answers).
# vllm 0.24.0 matches the GPU machine's torch 2.11 and its bundled Triton 3.6, as prepare.sh says.
set -euo pipefail
WHEEL="" OUT="" CHECK=1
while [ $# -gt 0 ]; do
  case "$1" in
    --wheel) WHEEL="$2"; shift 2 ;;  # build from this wheel (and refresh the cache) instead of downloading
    --out) OUT="$2"; shift 2 ;;      # write the pack here instead of .device-triton/
    --no-check) CHECK=0; shift ;;    # skip importing the kernel from the pack (done where torch and triton are)
    *) break ;;
  esac
done
VLLM_VERSION="${1:-0.24.0}"
[ -z "$WHEEL" ] || [ -f "$WHEEL" ] || { echo "error: --wheel $WHEEL: no such file" >&2; exit 1; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/attnbench-device/vllm-$VLLM_VERSION-triton"
out="${OUT:-$(git rev-parse --show-toplevel)/.device-triton}"
FILES="
vllm/envs.py vllm/logger.py vllm/logging_utils/__init__.py vllm/logging_utils/access_log_filter.py
vllm/logging_utils/formatter.py vllm/logging_utils/lazy.py vllm/logging_utils/log_time.py
vllm/logging_utils/torch_tensor.py vllm/platforms/interface.py vllm/triton_utils/__init__.py
vllm/triton_utils/importing.py vllm/utils/__init__.py vllm/utils/import_utils.py vllm/utils/math_utils.py
vllm/utils/platform_utils.py vllm/utils/torch_utils.py vllm/v1/__init__.py vllm/v1/attention/__init__.py
vllm/v1/attention/backends/__init__.py vllm/v1/attention/backends/registry.py vllm/v1/attention/ops/__init__.py
vllm/v1/attention/ops/triton_attention_helpers.py vllm/v1/attention/ops/triton_unified_attention.py
vllm/v1/kv_cache_interface.py vllm/v1/kv_cache_spec_registry.py
"

if [ -n "$WHEEL" ] || [ ! -f "$cache/vllm-triton-site.tar.xz" ]; then
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
  if [ -z "$WHEEL" ]; then
    echo "downloading vllm==$VLLM_VERSION wheel (about 280 MB) ..."
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d "$scratch/whl" "vllm==$VLLM_VERSION" 2>&1 | grep -v '^WARNING: Location' || true
    WHEEL=$(ls "$scratch"/whl/vllm-*.whl)
  fi
  mkdir -p "$scratch/site/vllm/platforms"
  python3 - "$WHEEL" "$scratch/site" "$VLLM_VERSION" $FILES <<'PY'
import sys, zipfile
wheel, site, version, files = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
wanted = files + [f"vllm-{version}.dist-info/METADATA"]
with zipfile.ZipFile(wheel) as z:
    missing = sorted(set(wanted) - set(z.namelist()))
    if missing:
        sys.exit(f"error: {wheel} is not a vllm {version} wheel with the kernel's files (lacks {', '.join(missing[:3])} ...)")
    z.extractall(site, wanted)
PY
  cat > "$scratch/site/vllm/__init__.py" <<PY
"""Stub written by attnbench's scripts/device/prepare_triton.sh: only the modules vLLM's unified Triton
attention imports are installed. extend_path joins every other vllm folder on sys.path (the .device
pack's vllm.vllm_flash_attn) into this package."""
from pkgutil import extend_path

__path__ = extend_path(__path__, __name__)
__version__ = "$VLLM_VERSION"
PY
  cp "$here/vllm_platforms_shim.py" "$scratch/site/vllm/platforms/__init__.py"
  mkdir -p "$cache"
  tar -C "$scratch/site" -cJf "$cache/vllm-triton-site.tar.xz" .
fi
mkdir -p "$out"
cp "$cache/vllm-triton-site.tar.xz" "$out/"
cp "$here/bootstrap_triton.sh" "$out/bootstrap.sh"
if [ "$CHECK" = 1 ] && python3 -c "import torch, triton" 2>/dev/null; then  # where torch is: the pack imports the kernel alone
  check=$(mktemp -d) && tar -xJf "$out/vllm-triton-site.tar.xz" -C "$check"
  CUDA_VISIBLE_DEVICES="" PYTHONPATH="$check" python3 -c "
import sys, vllm.v1.attention.ops.triton_unified_attention as m
outside = [n for n, mod in sys.modules.items() if n.startswith('vllm') and '$check' not in str(getattr(mod, '__file__', '$check'))]
assert not outside, outside
print('checked: the kernel module imports from the pack alone')" 2>&1 | grep -v '^INFO\|^W[0-9]'
  rm -rf "$check"
fi
echo "ready: $(du -sh "$out" | cut -f1) in .device-triton/"
echo 'GPU command prefix: source .device/bootstrap.sh && source .device-triton/bootstrap.sh && '
