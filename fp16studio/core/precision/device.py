"""What a device can do for each precision variant, known before anything runs: whether the
dtype has native compute there, and the peak throughput a figure is a fraction of."""

from __future__ import annotations

from ..common.precision import cpu_has_native_bf16, cpu_has_native_fp16

# Dense peak TFLOP/s by GPU name (NVIDIA's data sheets, without sparsity): fp32, tf32, 16-bit;
# and the memory bandwidth in GB/s. The first name contained in the device's name wins.
GPU_PEAKS = (
    ("H100 PCIe", {"float32": 51.0, "tf32": 378.0, "half": 756.0, "gb_per_s": 2000.0}),
    ("H100", {"float32": 67.0, "tf32": 495.0, "half": 989.0, "gb_per_s": 3350.0}),
    ("H200", {"float32": 67.0, "tf32": 495.0, "half": 989.0, "gb_per_s": 4800.0}),
)


def compute_dtype(variant: str) -> str:
    """The dtype a variant's matmuls run in: float32, tf32, float16 or bfloat16."""
    return variant.removeprefix("autocast-")


def tf32_active(device) -> bool:
    """Whether float32 matmuls run as TF32 here (Ampere and newer, when torch allows it)."""
    import torch

    if device.type != "cuda" or torch.cuda.get_device_capability(device) < (8, 0):
        return False
    return bool(torch.backends.cuda.matmul.allow_tf32
                or torch.get_float32_matmul_precision() != "highest")


def variant_support(variant: str, device) -> tuple[str, str | None]:
    """("native" | "emulated" | "unsupported", why) for the variant on this device."""
    import torch

    dtype = compute_dtype(variant)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        major, minor = torch.cuda.get_device_capability(device)
        if dtype == "tf32":
            if (major, minor) < (8, 0):
                return "unsupported", (f"{name} (compute capability {major}.{minor}) has no "
                                       "TF32 units (8.0 or newer): float32 would run as float32")
            return "native", "float32 weights; matmuls and convolutions as TF32 (10-bit mantissa)"
        if dtype == "bfloat16" and (major, minor) < (8, 0):
            with torch.cuda.device(device):
                if torch.cuda.is_bf16_supported(including_emulation=True):
                    return "emulated", (f"{name} (compute capability {major}.{minor}) has no "
                                        "bfloat16 units (8.0 or newer): emulated, slow")
            return "unsupported", (f"bfloat16 is not supported by {name} (compute capability "
                                   f"{major}.{minor}; bfloat16 needs 8.0 or newer)")
        if dtype == "float16" and (major, minor) < (7, 0) and (major, minor) not in ((6, 0),
                                                                                      (6, 2)):
            return "emulated", (f"{name} (compute capability {major}.{minor}) has no fast "
                                "float16: expect no speed-up")
        if dtype == "float32" and tf32_active(device):
            return "native", "float32 matmuls run as TF32 (torch allows it on this GPU)"
        return "native", None
    if dtype == "tf32":
        return "unsupported", "TF32 is a mode of NVIDIA GPUs (compute capability 8.0 or newer)"
    if device.type == "cpu":
        if dtype == "float16" and not cpu_has_native_fp16():
            return "emulated", ("this CPU has no float16 instructions (AVX512-FP16, AMX-FP16): "
                                "most operators convert to float32 and back")
        if dtype == "bfloat16" and not cpu_has_native_bf16():
            return "emulated", ("this CPU has no bfloat16 instructions (AVX512-BF16, AMX): "
                                "most operators convert to float32 and back")
    return "native", None


def _peaks(device, device_name: str) -> dict | None:
    if device.type != "cuda":
        return None
    return next((p for name, p in GPU_PEAKS if name in device_name), None)


def peak_gb_per_s(device, device_name: str) -> float | None:
    """The GPU's memory bandwidth, or None for an unknown device."""
    peaks = _peaks(device, device_name)
    return peaks["gb_per_s"] if peaks else None


def peak_tflops(device, device_name: str, variant: str) -> float | None:
    """The GPU's dense peak for the variant's compute dtype, or None for an unknown device."""
    peaks = _peaks(device, device_name)
    if peaks is None:
        return None
    dtype = compute_dtype(variant)
    if dtype == "tf32" or (dtype == "float32" and tf32_active(device)):
        return peaks["tf32"]
    return peaks["float32"] if dtype == "float32" else peaks["half"]
