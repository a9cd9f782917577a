#!/usr/bin/env bash
# Packs FlashInfer 0.7.x's paged-attention wrappers (BatchDecode/BatchPrefill WithPagedKVCacheWrapper,
# PODWithPagedKVCacheWrapper, BatchAttention, cascade, page helpers) for the GPU machine, beside or
# instead of the shared 0.6.6 pack (shared/device/prepare_flashinfer.sh, .device-fi/), to check the
# release vLLM pins (0.7.2.post1) there. docs/kernels/flashinfer.md says how to use it.
#
# Run it from the project's root where the package registry is (the GPU machine has none):
#   bash scripts/device/prepare_flashinfer07.sh [FLASHINFER_VERSION [TVM_FFI_VERSION]]
# (defaults 0.7.2.post1 and 0.1.15.post2, the newest apache-tvm-ffi in 0.7.2's >=0.1.11,<0.2). It
# downloads the wheels once (62 MB) into ~/.cache/attnbench-device/, prunes them (fi_pack.py says
# what is kept) and writes .device-fi07/ (ignored by git): fi07-site.tar.xz and bootstrap_fi07.sh.
# A GPU command then carries [".device-fi07"] and starts with `source .device-fi07/bootstrap_fi07.sh && `.
#
# Only flashinfer-python and apache-tvm-ffi travel. 0.7.x's other requirements (cuda-python,
# cuda-tile, nccl4py, nccl-extensions, nvidia-cudnn-frontend, nvidia-cutlass-dsl) stay out: `import
# flashinfer` 0.7.2.post1 succeeds without them (checked on a CPU machine with torch and
# cuda-bindings), and the attention wrappers do not use them. flashinfer 0.7.x does not pin torch.
set -euo pipefail
FI_VERSION="${1:-0.7.2.post1}"
TVM_FFI_VERSION="${2:-0.1.15.post2}"
top=$(git rev-parse --show-toplevel)
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache="${XDG_CACHE_HOME:-$HOME/.cache}/attnbench-device/flashinfer-$FI_VERSION-tvmffi-$TVM_FFI_VERSION"
out="$top/.device-fi07"
mkdir -p "$cache/whl"

dl() {  # dl NAME==VERSION: a cp312 manylinux (or pure Python) wheel, as the GPU machine needs
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$cache/whl" "$1" 2>&1 | grep -v '^WARNING: Location' || true
}

if [ ! -f "$cache/fi07-site.tar.xz" ]; then
  ls "$cache"/whl/flashinfer_python-"$FI_VERSION"-*.whl >/dev/null 2>&1 || { echo "downloading flashinfer-python==$FI_VERSION ..."; dl "flashinfer-python==$FI_VERSION"; }
  ls "$cache"/whl/apache_tvm_ffi-"$TVM_FFI_VERSION"-cp312-*.whl >/dev/null 2>&1 || { echo "downloading apache-tvm-ffi==$TVM_FFI_VERSION ..."; dl "apache-tvm-ffi==$TVM_FFI_VERSION"; }
  site="$cache/site"
  rm -rf "$site" && mkdir -p "$site"
  python3 "$here/fi_pack.py" "$site" "$cache"/whl/flashinfer_python-"$FI_VERSION"-*.whl \
    "$cache"/whl/apache_tvm_ffi-"$TVM_FFI_VERSION"-cp312-*.whl
  echo "compressing (a few minutes) ..."
  tar --sort=name --mtime='2025-01-01 00:00:00' --owner=0 --group=0 --numeric-owner -C "$site" -cf - . \
    | xz -T0 -9e > "$cache/fi07-site.tar.xz.tmp"
  mv "$cache/fi07-site.tar.xz.tmp" "$cache/fi07-site.tar.xz"
  rm -rf "$site"
fi

rm -rf "$out" && mkdir -p "$out"
cp "$cache/fi07-site.tar.xz" "$out/"
cat > "$out/bootstrap_fi07.sh" <<'BOOT'
# Sourced on the GPU machine: unpacks .device-fi07/fi07-site.tar.xz (flashinfer 0.7.x + tvm-ffi) into
# /tmp/attnbench-fi07-site once per machine and puts it first on PYTHONPATH, so that `import
# flashinfer` finds it (not a 0.6.6 pack's). Kernels JIT-compile with the machine's nvcc on first use
# into /tmp/attnbench-fi07-work/.cache/flashinfer/<version>/, on all cores; 0.6.6's caches do not apply.
_fi_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
_fi_site=/tmp/attnbench-fi07-site
export FLASHINFER_WORKSPACE_BASE=/tmp/attnbench-fi07-work
export TVM_FFI_CACHE_DIR=/tmp/attnbench-fi07-work/tvm-ffi
export MAX_JOBS="${MAX_JOBS:-$(nproc)}"
if [ -z "${CUDA_HOME:-}${CUDA_PATH:-}" ] && ! command -v nvcc >/dev/null 2>&1; then
  for _c in /usr/local/cuda /usr/local/cuda-13.0 /usr/local/cuda-13; do
    [ -x "$_c/bin/nvcc" ] && { export CUDA_HOME="$_c"; break; }
  done
fi
if [ ! -f "$_fi_site/.ready" ]; then
  rm -rf "$_fi_site" && mkdir -p "$_fi_site" "$FLASHINFER_WORKSPACE_BASE" "$TVM_FFI_CACHE_DIR"
  tar -xJf "$_fi_dir/fi07-site.tar.xz" -C "$_fi_site" && touch "$_fi_site/.ready"
fi
export PYTHONPATH="$_fi_site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
unset _fi_dir _fi_site _c
BOOT
echo "ready: $(du -sh "$out" | cut -f1) in .device-fi07/ (the device tool carries at most 64 MiB with your tree)"
echo 'GPU command prefix: source .device-fi07/bootstrap_fi07.sh && '
