"""How far a half run's tensor is from float32's, defined once for drift (every module's output)
and bench (the primary output).

Both tensors are taken whole, flattened, the variant's values in the reference's dtype:

- max |diff| = max_i |out_i - ref_i|;
- cosine = <ref, out> / (|ref| |out|); 1 for two zero tensors, 0 where only one is zero;
- SQNR = 10 log10(|ref|^2 / |out - ref|^2) dB, the signal-to-quantisation-noise ratio (20 dB:
  noise at 1% of the signal's power), held within +-SQNR_CEILING_DB: identical tensors get the
  ceiling rather than infinity, a zero reference against anything else its negative.

Over the whole tensor, as PyTorch's Numeric Suite takes them (`torch.ao.ns.fx.utils`
compute_sqnr, compute_cosine_similarity), so the figures of a module's output and of the
model's output compare like with like. Where the variant holds inf/NaN they mean nothing: they
are None, and its inf/NaN count says why.
"""

from __future__ import annotations

import math

# Identical tensors have no noise: their SQNR is reported as this ceiling, not as infinity.
SQNR_CEILING_DB = 200.0
DISTANCES = ("max_abs_diff", "cosine", "sqnr_db")


def distance_sums(reference, variant):
    """What `distances` reads, as one 1-d tensor on the tensors' device (no sync): max |diff|,
    |ref|^2, |out|^2 and |out - ref|^2; None where the shapes differ."""
    import torch

    if reference.shape != variant.shape:
        return None
    ref = reference.detach().reshape(-1)
    out = variant.detach().reshape(-1).to(ref.dtype)
    if not ref.numel():
        return ref.new_zeros(4)
    diff = out - ref
    low, high = torch.aminmax(diff)
    # Dot products: one BLAS call each, no temporary tensor.
    return torch.stack([torch.maximum(low.abs(), high.abs()), torch.dot(ref, ref),
                        torch.dot(out, out), torch.dot(diff, diff)])


def distances(sums) -> dict:
    """{"max_abs_diff", "cosine", "sqnr_db"} from `distance_sums` read back (floats); each None
    where a sum is not finite (inf/NaN in the variant, or squares past its dtype's range)."""
    max_abs_diff, signal, power, noise = sums
    if not all(math.isfinite(value) for value in sums):
        return dict.fromkeys(DISTANCES)
    if noise == 0:
        cosine, sqnr = 1.0, SQNR_CEILING_DB
    else:
        norms = math.sqrt(signal * power)
        # 1 - cosine from the noise (|out - ref|^2 = |ref|^2 + |out|^2 - 2 <ref, out>): in a
        # float32 sum of <ref, out> rounding swamps a float16 copy's 1 - cosine, about 2e-8.
        cosine = (1 - (noise - (math.sqrt(signal) - math.sqrt(power)) ** 2) / (2 * norms)
                  if norms else 0.0)
        sqnr = 10 * math.log10(signal / noise) if signal else -SQNR_CEILING_DB
    return {"max_abs_diff": max_abs_diff, "cosine": min(1.0, max(-1.0, cosine)),
            "sqnr_db": min(SQNR_CEILING_DB, max(-SQNR_CEILING_DB, sqnr))}


def reference_copy(output):
    """(name, tensor) of the primary output, detached to the CPU in float32 so a variant's model
    can be freed; None where the output holds no tensor."""
    from .pipeline import primary_output

    name, tensor = primary_output(output)
    return None if tensor is None else (name, tensor.detach().float().cpu())


def nonfinite_count(copy) -> int:
    """inf/NaN values in a `reference_copy`'s tensor (0 for none)."""
    import torch

    return 0 if copy is None else int((~torch.isfinite(copy[1])).sum())


def output_distance(reference, variant) -> dict:
    """Two runs' primary outputs (each a `reference_copy`) compared: {"name", "max_abs_diff",
    "cosine", "sqnr_db", "top1_agreement", "nonfinite"}. Top-1 agreement only for logits: the
    share of rows whose argmax is unchanged. Where the variant holds inf/NaN they are counted
    and the rest is None; all but the name is None where the outputs are not the same one."""

    out = {"name": variant[0] if variant else None, **dict.fromkeys(DISTANCES),
           "top1_agreement": None, "nonfinite": None}
    if reference is None or variant is None:
        return out
    (ref_name, ref), (name, var) = reference, variant
    if ref_name != name or ref.shape != var.shape:
        return out
    out["nonfinite"] = nonfinite_count(variant)
    if out["nonfinite"]:
        return out
    out |= distances(distance_sums(ref, var).tolist())
    if name == "logits" and ref.dim() >= 1 and ref.shape[-1] > 1:
        out["top1_agreement"] = float((var.argmax(-1) == ref.argmax(-1)).double().mean())
    return out
