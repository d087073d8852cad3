"""Precision facts, said once: what each floating dtype holds, what this CPU computes natively,
the error texts that name a half-precision failure, and which frames are fp16studio's own.

Low in core on purpose: the rules, the tracer of a user's script, the bench and the tree all read
these, and each kept its own copy before (issue 27).
"""

from __future__ import annotations

import functools
import os
import re
import sys
from pathlib import Path

# The largest finite value of each floating dtype.
FLOAT_MAX = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38,
             "float32": 3.4028234663852886e38, "float64": 1.7976931348623157e308}
FP16_MAX = FLOAT_MAX["float16"]
# float16's smallest normal value: below it a value keeps fewer bits, then flushes to zero.
FP16_TINY = 2.0 ** -14
# Every integer up to this is exact in the dtype (its mantissa bits plus the implicit one);
# above it neighbours round together: position 257 is 256 in bfloat16.
EXACT_INTEGERS = {"bfloat16": 2 ** 8, "float16": 2 ** 11, "float32": 2 ** 24}
# The spacing of numbers just above 1 (torch.finfo(dtype).eps).
EPSILON = {"bfloat16": 2.0 ** -7, "float16": 2.0 ** -10, "float32": 2.0 ** -23}

# Error texts, as CPU and CUDA kernels and torch versions word them (shared/FAILURES.md). They
# support a rule, never decide it alone: the evidence does.
DTYPE_ERRORS = re.compile(
    r"should be the same|must have the same dtype|expected scalar type|expected both|"
    r"mixed dtype|expected m1 and m2 to have the same dtype|found at least two dtypes|"
    r"expected .*dtype.* but got", re.I)
DEVICE_ERRORS = re.compile(r"same device|found at least two devices|is not on the expected device|"
                           r"torch\.cuda\.\w+Tensor\) and weight type \(torch\.\w+Tensor", re.I)
HALF_KERNEL_ERRORS = re.compile(
    r"not implemented for '(Half|BFloat16)'|Unsupported dtype (Half|BFloat16)|"
    r"Low precision dtypes not supported", re.I)
INTEGER_ERRORS = re.compile(r"indices|scalar types: Long|expected target dtype|"
                            r"Target size .* must be the same as input size|Long but", re.I)
# BCE-with-logits given integer targets (a multi-label classifier fed multi-hot int64 labels).
MULTI_LABEL_ERRORS = re.compile(r"result type Float can't be cast to the desired output type Long|"
                                r"Found dtype Long but expected Float", re.I)
LIST_ERRORS = re.compile(r"'list' object has no attribute", re.I)
DEVICE_MISSING_ERRORS = re.compile(r"not compiled with CUDA|no NVIDIA driver|No CUDA GPUs|"
                                   r"invalid device ordinal|CUDA driver|MPS .*not available", re.I)
# torch's GradScaler.unscale_ on half gradients: float16 weights, and bfloat16 ones (whose
# unscale kernel has no bfloat16: "_amp_foreach_non_finite_check_and_unscale_cuda" not
# implemented for 'BFloat16').
UNSCALE_FP16_ERRORS = re.compile(r"Attempting to unscale FP16 gradients")
UNSCALE_BF16_ERRORS = re.compile(r"non_finite_check_and_unscale\w*\" not implemented for 'BFloat16'")

HALF_TORCH_NAMES = {"Half": "float16", "BFloat16": "bfloat16"}


@functools.cache
def cpu_flags() -> frozenset:
    """The CPU's instruction-set flags as Linux names them; empty where unknown (not Linux):
    then no native half is promised."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return frozenset()
    return frozenset(flag for line in text.splitlines() if line.startswith("flags")
                     for flag in line.split(":", 1)[1].split())


def cpu_has_native_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (AVX512-BF16 or AMX); else torch emulates it,
    slower than float32."""
    return bool(cpu_flags() & {"avx512_bf16", "amx_bf16"})


def cpu_has_native_fp16() -> bool:
    """Whether this CPU computes float16 natively (AVX512-FP16 or AMX-FP16)."""
    return bool(cpu_flags() & {"avx512_fp16", "amx_fp16"})


# The fp16studio package: frames from here are its own (wrappers, watchers). The frozen program
# names them relative to its archive ("fp16studio/core/...").
OUR_FOLDER = str(Path(__file__).resolve().parents[2]) + os.sep
OUR_PREFIXES = ((OUR_FOLDER, "fp16studio" + os.sep) if getattr(sys, "frozen", False)
                else (OUR_FOLDER,))


def is_ours(filename: str) -> bool:
    """A frame of fp16studio's own code, in a source install and in the frozen build."""
    return filename.startswith(OUR_PREFIXES)


def float8_scale(amax, largest: float, power_of_2: bool = False):
    """torchao's dynamic float8 scale (`amax_to_scale`): the float8 dtype's `largest` value over
    the abs-max (a tensor) clamped at 1e-12, in float64 then float32; rounded down to a power
    of 2 where the recipe says so (rowwise)."""
    import torch

    scale = (largest / amax.double().clamp(min=1e-12)).float()
    return torch.exp2(torch.floor(torch.log2(scale))) if power_of_2 else scale


def float8_smallest(dtype) -> float:
    """A float8 dtype's smallest subnormal: scaled values under it lose all but their order of
    magnitude, or flush to zero (e4m3: 2**-9, e5m2: 2**-16)."""
    import torch

    info = torch.finfo(dtype)
    return info.smallest_normal * info.eps
