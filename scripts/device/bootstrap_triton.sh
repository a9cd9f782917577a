# Sourced on the GPU machine after .device/bootstrap.sh (if used): unpacks .device-triton/ into a
# site folder and puts it first on PYTHONPATH, so that
# `import vllm.v1.attention.ops.triton_unified_attention` works there without vLLM's compiled
# extension. Its stub `vllm/__init__.py` joins every other `vllm` folder on the path (pkgutil
# extend_path), so `vllm.vllm_flash_attn` from .device stays importable: source this one last.
# Triton compiles the kernels on first use and caches them under $TRITON_CACHE_DIR.
_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
_site=/tmp/attnbench-triton-site
_stamp=$(cksum < "$_dir/vllm-triton-site.tar.xz" | cut -d' ' -f1)
if [ "$(cat "$_site/.ready" 2>/dev/null)" != "$_stamp" ]; then
  rm -rf "$_site" && mkdir -p "$_site"
  tar -xJf "$_dir/vllm-triton-site.tar.xz" -C "$_site"
  echo "$_stamp" > "$_site/.ready"
fi
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-/tmp/attnbench-triton-cache}"
export PYTHONPATH="$_site${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
unset _dir _site _stamp
