"""Float32 islands: the smallest set of modules to run in float32 (`run_in_float32`) so a half
model's output is finite and within tolerance while the rest stays half.

Candidates come from the float32 run's magnitudes (a module whose output float16 cannot hold,
widened to the smallest enclosing module whose inputs and outputs it can: NVIDIA's ONNX AutoCast
keeps nodes in float32 by such a threshold), and from where the half run first drifted. The
search then bisects over them (Polygraphy's `debug precision` does this for TensorRT): first the
shortest prefix that works, then the shortest tail of that prefix. Each try re-runs the one
loaded half model on the one batch, with the islands' float32 weights taken from the one loaded
float32 model; the set found is verified once more through the real load path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..run.compare import OutputDrift, OutputRecorder, cast_batch, output_drift, within_tolerance
from ..spec.value import PipelineSpec
from .findings import CodeEdit, Fix
from ..common.island_code import islands_code
from ..common.precision import FP16_MAX, FP16_TINY

# An island's boundary, its inputs and outputs in float32, must stay under this (half of
# float16's range: room for the half run's rounding) and above FP16_TINY; inside, anything goes.
BOUNDARY_LIMIT = FP16_MAX / 2
DRIFT_CANDIDATES = 8            # diverged modules considered, in the order they returned
# Islands holding more than half the parameters are no longer "the rest stays half": the
# model-wide fixes say that better.
MIN_HALF_SHARE = 0.5


@dataclass
class IslandSearch:
    modules: list                # the islands found, verified
    half_share: float            # share of parameters (elements) that stay half
    passes: int                  # forward passes the search took, float32 reference included
    candidates: int              # N
    output: OutputDrift          # the output's drift from float32 with the islands
    dtype: str                   # the half dtype around them

    def evidence(self) -> dict:
        return {"islands": list(self.modules), "parameters kept half": round(self.half_share, 4),
                "search forward passes": self.passes, "island candidates": self.candidates,
                "output sqnr dB with islands": self.output.sqnr_db}

    def summary(self) -> str:
        return (f"Running {_names(self.modules)} in float32 keeps "
                f"{self.half_share:.1%} of the parameters in {self.dtype} and makes the output "
                f"finite and within tolerance (found in {self.passes} forward passes over "
                f"{self.candidates} candidate module{'s' if self.candidates != 1 else ''}).")


def with_islands(spec: PipelineSpec, names) -> list[str]:
    """The spec's run_in_float32 with the module names added, each as a pattern of itself."""
    from ..hf.loading import literal_pattern

    return sorted(set(spec.run_in_float32) | {literal_pattern(name) for name in names})


def _names(modules) -> str:
    return ", ".join(modules[:3]) + (f" and {len(modules) - 3} more" if len(modules) > 3 else "")


def islands_fix(spec: PipelineSpec, search: IslandSearch) -> Fix:
    names = list(search.modules)
    patterns = with_islands(spec, names)
    return Fix("float32-islands",
               f"Run {len(names)} module{'s' if len(names) > 1 else ''} in float32, "
               f"keep {search.half_share:.0%} of the model {search.dtype}",
               {"run_in_float32": patterns},
               f"{_names(names)} run in float32 (inputs cast up, outputs cast back); the rest "
               f"stays {search.dtype}", CodeEdit(islands_code(patterns, search.dtype)))


# -- candidates ---------------------------------------------------------------------------------

def candidates(reference_calls: list, dtype: str, diverged=()) -> list[str]:
    """Island candidates, most out of range first, then where the half run drifted first.

    `reference_calls`: a float32 OutputRecorder's rows (name, in_absmax, out_absmax, ...);
    `diverged`: the modules whose output parted from float32, in the order they returned.
    """
    inputs, outputs = {}, {}
    for row in reference_calls:
        name = row["name"]
        inputs[name] = max(inputs.get(name, 0.0), row.get("in_absmax") or 0.0)
        outputs[name] = max(outputs.get(name, 0.0), row.get("out_absmax") or 0.0)

    def badness(value) -> float:
        if dtype != "float16" or value == 0:
            return 0.0
        return max(value / BOUNDARY_LIMIT, FP16_TINY / value)

    def enclosing(name) -> str | None:
        while name:
            if name in outputs and badness(outputs[name]) <= 1 and badness(inputs[name]) <= 1:
                return name
            name = name.rpartition(".")[0]
        return None  # only the whole model holds it: that is no island

    # Hot: a module whose output, or input, float16 cannot hold (an input made by functional
    # code, `act(gate(x)) * up(x)`, shows only there).
    heat = {n: max(badness(outputs[n]), badness(inputs[n])) for n in outputs if n}
    hot = sorted((n for n in heat if heat[n] > 1), key=lambda n: -heat[n])
    chosen: list[str] = []
    for name in [enclosing(n) for n in hot]:
        if name is None or name in chosen or any(name.startswith(c + ".") for c in chosen):
            continue
        chosen = [c for c in chosen if not c.startswith(name + ".")] + [name]
    # Where the drift started, inner modules first: the error may come in with a module's
    # input, so the modules around it follow (the search keeps the outermost it needs).
    magnitude = tuple(chosen)
    for name in [enclosing(n) for n in diverged if n][:DRIFT_CANDIDATES]:
        if name and name not in chosen and not any(name.startswith(c + ".") for c in magnitude):
            chosen.append(name)
    return chosen


def outermost(names) -> list[str]:
    """`names` without those inside another one."""
    return [n for n in names if not any(n.startswith(o + ".") for o in names)]


# -- the search ---------------------------------------------------------------------------------

def search_islands(spec: PipelineSpec, half_model, half_batch, float32_model, reference_calls,
                   reference_output, diverged=(), cancel=None):
    """The smallest island set found, verified; None when no set of candidates works."""
    from ..common.errors import check_cancel
    from ..hf.loading import model_half_dtype

    dtype = model_half_dtype(half_model)
    if dtype is None:
        return None
    dtype_name = str(dtype).replace("torch.", "")
    names = candidates(reference_calls, dtype_name, diverged)
    device = next(half_model.parameters()).device
    tried: dict = {}
    passes = 1  # the float32 reference

    def works(subset) -> bool:
        nonlocal passes
        key = tuple(subset)
        if key not in tried:
            check_cancel(cancel)
            passes += 1
            output = _try(spec, half_model, half_batch, float32_model, subset, dtype, device)
            tried[key] = output is not None and within_tolerance(
                output_drift(reference_output, output))
        return tried[key]

    found = bisect(names, works)
    if found is None:
        return None
    chosen = outermost(found)
    share = half_share(half_model, chosen)
    if share < MIN_HALF_SHARE:
        return None
    passes += 1
    output = _verify(spec, chosen, half_batch, reference_output)
    if output is None:
        return None
    return IslandSearch(modules=chosen, half_share=share, passes=passes,
                        candidates=len(names), output=output, dtype=dtype_name)


def bisect(names: list, works) -> list | None:
    """The shortest prefix of `names` that works, then the shortest tail of that prefix:
    1 + 2*ceil(log2 N) calls of `works` at most; None when all of `names` does not work."""
    if not names or not works(names):
        return None
    low, high = 1, len(names)
    while low < high:
        mid = (low + high) // 2
        low, high = (low, mid) if works(names[:mid]) else (mid + 1, high)
    end = high
    low, high = 0, end - 1
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if works(names[mid:end]) else (low, mid - 1)
    return names[low:end]


def _try(spec, model, batch, float32_model, names, dtype, device):
    """The half model's output with `names` as islands (float32 weights borrowed), or None."""
    from ..hf.loading import float32_islands, literal_pattern
    from ..run.pipeline import run_forward

    saved = []
    for name in names:
        source = float32_model.get_submodule(name)
        weights = dict(source.named_parameters()) | dict(source.named_buffers())
        island = model.get_submodule(name)
        for key, tensor in [*island.named_parameters(), *island.named_buffers()]:
            if tensor.is_floating_point() and key in weights:
                saved.append((tensor, tensor.data))
                tensor.data = weights[key].data
    handles = [h for _, pair in float32_islands(model, [literal_pattern(n) for n in names], dtype)
               for h in pair]
    try:
        return run_forward(spec, model, batch, device)
    except Exception:  # noqa: BLE001 - a set that breaks the run is a set that does not work
        return None
    finally:
        for handle in handles:
            handle.remove()
        for tensor, data in reversed(saved):  # an island inside another was saved last
            tensor.data = data


def _verify(spec, names, batch, reference_output):
    """The islands through the real load path (run_in_float32), on the same batch."""
    from ..run.pipeline import prepare_model, run_forward

    fixed = spec.replace(run_in_float32=with_islands(spec, names))
    loaded, _ = prepare_model(fixed)
    try:
        output = run_forward(fixed, loaded.model, batch, loaded.device)
    except Exception:  # noqa: BLE001
        return None
    drift = output_drift(reference_output, output)
    return drift if within_tolerance(drift) else None


def half_share(model, islands) -> float:
    """The share of parameter elements outside the islands."""
    total = sum(p.numel() for p in model.parameters())
    inside = sum(p.numel() for name in islands
                 for p in model.get_submodule(name).parameters())
    return 1.0 - inside / total if total else 1.0


def max_passes(n: int) -> int:
    """The issue's bound on forward passes for N candidates: 2*ceil(log2 N) + 4."""
    return 2 * math.ceil(math.log2(max(n, 1))) + 4


# -- the search for a diagnosis's overflow ----------------------------------------------------

def island_search(findings: list, spec: PipelineSpec, model, batch, cancel=None):
    """The float32 islands for a half model's `overflow` among `findings`, when a search finds
    islands that work (the float32 model is loaded once for it), else None. The rules take it
    as evidence (`Evidence.islands`): the overflow they return then has it as its first fix."""
    if not any(f.code == "overflow" for f in findings) or spec.autocast or model is None \
            or batch is None:
        return None
    from ..hf.loading import model_half_dtype

    if model_half_dtype(model) is None:
        return None
    from ..common.errors import Cancelled

    try:
        return islands_for(spec, model, batch, cancel)
    except Cancelled:
        raise
    except Exception:  # noqa: BLE001 - the search is an extra: the diagnosis stands without it
        return None


def islands_for(spec: PipelineSpec, model, batch, cancel=None):
    """Search islands for a half model and its batch: load float32 once, record its magnitudes
    and output on the same batch (floating inputs cast up; under no_grad, see OutputRecorder),
    then search."""
    from ..run.pipeline import prepare_model, run_forward

    reference_spec = spec.replace(model_dtype="float32", model_cast=None, run_in_float32=[],
                                  autocast=None)
    loaded, _ = prepare_model(reference_spec)
    with OutputRecorder(loaded.model, inputs=True) as reference:
        output = run_forward(reference_spec, loaded.model, cast_batch(batch, "float32"),
                             loaded.device, inference=False)
    return search_islands(spec, model, batch, loaded.model, reference.calls, output,
                          cancel=cancel)
