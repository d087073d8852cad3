"""Autocast's per-device operation lists: what it runs in float32 on one device type and leaves
in half precision on another (torch's aten/src/ATen/autocast_mode.cpp, the tables in the
torch.amp documentation; the CPU side checked against torch in tests/core/test_quiet_values.py).

The same line under `torch.autocast` can be safe on a GPU and lose values on a CPU: CUDA's
autocast computes `x.pow(2)`, `exp`, `softmax`, `sum`, `layer_norm`... in float32, the CPU's
leaves them in bfloat16; the CPU's computes `quantile`, `cdist`, `prod`... in float32, while
CUDA's leaves `prod` in half. Names are the torch functions as a torch-function mode sees them
(`pow`, `__pow__`, `softmax`).
"""

from __future__ import annotations

# Run in float32 under CUDA's autocast (float16 or bfloat16 inputs cast up first).
_CUDA_FLOAT32 = frozenset((
    "pow", "__pow__", "__rpow__", "__rtruediv__", "__rdiv__", "acos", "asin", "cosh", "sinh",
    "tan", "erfinv", "exp", "expm1", "log", "log10", "log1p", "log2", "reciprocal", "rsqrt",
    "softmax", "log_softmax", "softmin", "softplus", "sum", "prod", "cumsum", "cumprod",
    "layer_norm", "group_norm", "norm", "normalize", "renorm", "dist", "pdist", "cdist",
    "cosine_similarity", "logsumexp", "linalg_vector_norm", "linalg_matrix_norm",
    "binary_cross_entropy_with_logits", "cross_entropy", "nll_loss", "kl_div", "l1_loss",
    "mse_loss", "smooth_l1_loss", "huber_loss", "poisson_nll_loss", "cosine_embedding_loss",
    "hinge_embedding_loss", "margin_ranking_loss", "multilabel_margin_loss",
    "multi_margin_loss", "soft_margin_loss", "triplet_margin_loss",
))
# Run in float32 under the CPU's autocast.
_CPU_FLOAT32 = frozenset((
    "prod", "quantile", "nanquantile", "stft", "cdist", "trace", "polar", "grid_sampler",
    "view_as_complex", "cholesky", "cholesky_inverse", "cholesky_solve", "inverse",
    "lu_solve", "orgqr", "ormqr", "pinverse", "geqrf", "qr", "svd", "triangular_solve",
    "avg_pool3d", "max_pool3d", "adaptive_avg_pool3d", "adaptive_max_pool3d",
    "binary_cross_entropy", "binary_cross_entropy_with_logits", "cross_entropy", "nll_loss",
    "kl_div", "l1_loss", "mse_loss", "smooth_l1_loss", "huber_loss", "poisson_nll_loss",
    "cosine_embedding_loss", "hinge_embedding_loss", "margin_ranking_loss", "ctc_loss",
    "multilabel_margin_loss", "multi_margin_loss", "soft_margin_loss", "triplet_margin_loss",
))
FLOAT32_UNDER_AUTOCAST = {"cuda": _CUDA_FLOAT32, "cpu": _CPU_FLOAT32}


def runs_in_float32(op: str, device_type: str) -> bool:
    """Whether autocast on `device_type` computes `op` in float32 (linalg_*, fft_* on a CPU)."""
    if device_type == "cpu" and op.startswith(("linalg_", "fft_")):
        return True
    return op in FLOAT32_UNDER_AUTOCAST.get(device_type, ())


def float32_elsewhere(op: str, device_type: str) -> list[str]:
    """The other device types whose autocast computes `op` in float32 where `device_type`'s
    leaves it in half precision: the line is safe there, not here."""
    if runs_in_float32(op, device_type):
        return []
    return [other for other in FLOAT32_UNDER_AUTOCAST
            if other != device_type and runs_in_float32(op, other)]
