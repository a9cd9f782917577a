"""attnbench's stand-in for `vllm/platforms/__init__.py` in the vllm-triton pack (prepare_triton.sh).

Why it exists: vLLM's own `vllm.platforms` picks CudaPlatform, whose module imports the compiled
extension `vllm._C_stable_libtorch` (and pynvml) at import; the pack carries no compiled code.
`triton_unified_attention.py` asks the platform two things, `fp8_dtype()` and
`is_device_capability_family(100)` (a Blackwell-only tuning), and the modules it imports ask a few
defaults more (`is_pin_memory_available`, ...). They get vLLM's own answers: this is vLLM's base
`Platform` (vllm/platforms/interface.py, shipped unmodified in the pack) with the CUDA enum and the
attributes of vLLM's CudaPlatformBase, and the device capability read from torch instead of NVML.
Nothing else of vLLM's platform layer is replaced.
"""

import torch

from vllm.platforms.interface import DeviceCapability, Platform, PlatformEnum


class TorchCudaPlatform(Platform):
    _enum = PlatformEnum.CUDA
    device_name = "cuda"
    device_type = "cuda"
    dispatch_key = "CUDA"
    ray_device_key = "GPU"
    dist_backend = "nccl"
    device_control_env_var = "CUDA_VISIBLE_DEVICES"

    @classmethod
    def get_device_capability(cls, device_id: int = 0) -> DeviceCapability | None:
        if not torch.cuda.is_available():
            return None
        return DeviceCapability(*torch.cuda.get_device_capability(device_id))


current_platform = TorchCudaPlatform()
