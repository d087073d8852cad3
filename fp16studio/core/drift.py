"""Drift, module by module (`fp16studio drift`): the pipeline in float32 and in a half variant on
the same batch, each module's output compared where both runs produced it.

Calls are aligned by module path and call index (the k-th call of `encoder.layer.0` in one run
meets the k-th in the other), so a module called a different number of times in each run still
lines up where it can. Statistics stay on the device during a pass and come back in one sync.
The result is a plain snapshot (numbers and strings) the window can show and pickle.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

from .errors import Cancelled, InputError, check_cancel, first_line, report_progress
from .findings import Finding
from .module_hooks import ModuleHooks
from .spec import PipelineSpec

# A module (or the output) parts from float32 when its signal-to-quantisation-noise ratio falls
# below this: noise at 1% of the signal's power (a cosine of about 0.995).
DRIFT_SQNR_DB = 20.0
# Identical outputs have no noise: their SQNR is reported as this ceiling, not as infinity.
SQNR_CEILING_DB = 200.0
VARIANTS = ("float16", "bfloat16", "autocast-float16", "autocast-bfloat16")


@dataclass
class ModuleDrift:
    name: str
    cls: str
    call: int                          # which call of this module (0 for the first)
    max_abs_diff: float | None         # None where the variant is not finite, or shapes differ
    cosine: float | None
    sqnr_db: float | None
    abs_max_float32: float | None
    abs_max_variant: float | None      # over the variant's finite values
    nonfinite: int                     # inf/NaN values in the variant's output

    @property
    def diverged(self) -> bool:
        return self.nonfinite > 0 or (self.sqnr_db is not None and self.sqnr_db < DRIFT_SQNR_DB)

    def to_json(self) -> dict:
        out = asdict(self)
        out["class"] = out.pop("cls")
        return out


@dataclass
class DriftResult:
    """The `drift --json` document (CONTRACT §3), plus findings, the error and timings."""

    variant: str
    device: str
    ok: bool = False
    first_divergent: str | None = None
    output: dict | None = None       # {"name", "max_abs_diff", "cosine", "top1_agreement", ...}
    modules: list = field(default_factory=list)       # ModuleDrift, in call order
    findings: list = field(default_factory=list)      # precision-drift / overflow, with fixes
    error: dict | None = None        # {"type", "message", "stage"} when a run failed
    timings: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"reference": "float32", "variant": self.variant, "ok": self.ok,
                "first_divergent": self.first_divergent, "output": self.output,
                "modules": [m.to_json() for m in self.modules],
                "findings": [f.to_json() for f in self.findings], "error": self.error,
                "device": self.device, "timings": self.timings}


class Recorder:
    """Forward hooks on every module for one pass: per call, the abs-max of the primary output;
    with `inputs`, of the floating inputs too (the float32 pass, for island candidates); with
    `keep`, the output itself (the float32 pass); with `against` (what a float32 Recorder
    kept), the comparison with it (the variant pass).

    One `aminmax` per tensor, recorded once even when it is one module's output and the next
    one's input; non-finite values are counted only where a statistic shows them.
    """

    def __init__(self, model, keep: bool = False, against: dict | None = None,
                 inputs: bool = False):
        self.model, self.keep, self.against, self.inputs = model, keep, against, inputs
        self.kept: dict = {}          # (name, call) -> float32 output tensor
        self.calls: list = []         # {name, cls, call, finished, stats...} in call order
        self._counts: dict = {}
        self._pending: list = []      # (row, {stat: 0-d tensor}, variant output) read at exit
        self._seen: dict = {}         # id(tensor) -> (weak reference, its 0-d abs-max)
        self._hooks = None
        self._stack = []
        self._finished = 0

    def __enter__(self):
        self._hooks = ModuleHooks(self.model, self._pre, self._post).__enter__()
        return self

    def __exit__(self, *exc):
        try:
            self._materialize()
        finally:
            self._hooks.__exit__()
        return False

    def _pre(self, name, module, args, kwargs):
        call = self._counts.get(name, 0)
        self._counts[name] = call + 1
        row = {"name": name, "cls": type(module).__name__, "call": call}
        self.calls.append(row)
        self._stack.append(row)

    def _post(self, module, args, kwargs, output):
        import torch

        row = self._stack.pop()
        row["finished"] = self._finished
        self._finished += 1
        out = next((t for t in _tensors(output) if t.is_floating_point() and t.numel()), None)
        stats, held = {}, None
        if self.inputs:
            inputs = [self._absmax(t) for t in _tensors((args, kwargs))
                      if t.is_floating_point() and t.numel()]
            if inputs:
                stats["in_absmax"] = torch.stack(inputs).max()
        if out is not None:
            stats["out_absmax"] = self._absmax(out)
            key = (row["name"], row["call"])
            if self.keep:
                self.kept[key] = out.detach().float()
            if self.against is not None and key in self.against:
                held = out.detach()
                stats.update(compare(self.against.pop(key), held))
        self._pending.append((row, stats, held))

    def _absmax(self, tensor):
        import weakref

        import torch

        seen = self._seen.get(id(tensor))
        if seen is not None and seen[0]() is tensor:
            return seen[1]
        low, high = torch.aminmax(tensor.detach())
        value = torch.maximum(-low, high).float()
        self._seen[id(tensor)] = (weakref.ref(tensor), value)
        return value

    def _materialize(self):
        import torch

        by_device: dict = {}  # one read-back (one sync) per device
        for row, stats, _ in self._pending:
            for key, value in stats.items():
                by_device.setdefault(value.device, []).append((row, key, value))
        for items in by_device.values():
            values = torch.stack([value.detach().double() for _, _, value in items]).tolist()
            for (row, key, _), value in zip(items, values):
                row[key] = value
        for row, _, held in self._pending:
            if held is not None:
                finish_comparison(row, held)
        self._pending.clear()
        self._seen.clear()


def compare(reference, variant) -> dict:
    """0-d tensors from which `finish_comparison` makes max |diff|, cosine and SQNR."""
    import torch

    if reference.shape != variant.shape:
        return {}
    ref = reference.reshape(-1)
    out = variant.reshape(-1).float()
    diff = out - ref
    low, high = torch.aminmax(diff)
    # Dot products: one BLAS call each, no temporary tensor.
    return {"max_abs_diff": torch.maximum(-low, high), "noise": torch.dot(diff, diff),
            "signal": torch.dot(ref, ref), "dot": torch.dot(ref, out),
            "power": torch.dot(out, out)}


def finish_comparison(row: dict, variant) -> None:
    """cosine, sqnr_db, identical and nonfinite from the read-back sums; where they are not
    finite, count the variant's inf/NaN and take its abs-max over the finite values."""
    import torch

    if "noise" not in row:
        return
    row["nonfinite"] = 0
    if not all(math.isfinite(row[k]) for k in ("noise", "dot", "power", "out_absmax")):
        finite = torch.isfinite(variant)
        row["nonfinite"] = int((~finite).sum())
        row["out_absmax"] = float(variant.abs().where(finite, 0).max()) if finite.any() else None
        return
    row["identical"] = row["noise"] == 0
    norms = math.sqrt(row["signal"] * row["power"])
    row["cosine"] = row["dot"] / norms if norms else (1.0 if row["identical"] else 0.0)
    row["sqnr_db"] = (SQNR_CEILING_DB if row["identical"] else
                      10 * math.log10(max(row["signal"], 1e-300) / row["noise"]))


def _tensors(value):
    from .trace import _flatten

    found = []
    _flatten(value, "", found)
    return [tensor for _, tensor in found]


def module_drifts(reference: Recorder, variant: Recorder) -> list[ModuleDrift]:
    """One ModuleDrift per call the variant compared, in call order."""
    absmax32 = {(r["name"], r["call"]): r.get("out_absmax") for r in reference.calls}
    rows = []
    for row in variant.calls:
        if "nonfinite" not in row:
            continue
        nonfinite = row["nonfinite"]
        finite = nonfinite == 0
        rows.append(ModuleDrift(
            name=row["name"], cls=row["cls"], call=row["call"],
            max_abs_diff=row["max_abs_diff"] if finite else None,
            cosine=row["cosine"] if finite else None,
            sqnr_db=min(row["sqnr_db"], SQNR_CEILING_DB) if finite else None,
            abs_max_float32=absmax32.get((row["name"], row["call"])),
            abs_max_variant=row.get("out_absmax"), nonfinite=nonfinite))
    return rows


def diverged_modules(modules: list[ModuleDrift], variant: Recorder) -> list[str]:
    """The modules whose output parted from float32, in the order they *returned* (inner
    modules return before outer ones): the first is where the drift starts."""
    finished = {(r["name"], r["call"]): r.get("finished", -1) for r in variant.calls}
    diverged = sorted((m for m in modules if m.diverged),
                      key=lambda m: finished[(m.name, m.call)])
    return list(dict.fromkeys(m.name for m in diverged))


def output_drift(reference_output, variant_output) -> dict:
    """The primary output compared: CONTRACT keys, plus SQNR, the non-finite count, finite."""
    from .bench_measure import drift, reference_copy

    ref, var = reference_copy(reference_output), reference_copy(variant_output)
    stats = drift(ref, var)
    out = {"name": var[0] if var else None,
           "max_abs_diff": stats["max_abs_diff_vs_float32"],
           "cosine": stats["cosine_vs_float32"], "top1_agreement": stats["top1_agreement"],
           "nonfinite": stats["nonfinite_outputs"], "sqnr_db": None}
    if ref is not None and var is not None and ref[1].shape == var[1].shape:
        row = {key: float(value) for key, value in compare(ref[1], var[1]).items()}
        row["out_absmax"] = float(var[1].abs().max())
        finish_comparison(row, var[1])
        if not row["nonfinite"]:
            out["sqnr_db"] = min(row["sqnr_db"], SQNR_CEILING_DB)
    out["finite"] = not out["nonfinite"]
    return out


def within_tolerance(output: dict) -> bool:
    return bool(output["finite"]) and output["sqnr_db"] is not None \
        and output["sqnr_db"] >= DRIFT_SQNR_DB


# -- the variant ------------------------------------------------------------------------------

def default_variant(spec: PipelineSpec) -> str:
    """The spec's own half precision (cast, load, autocast, inputs), else float16."""
    if spec.autocast:
        return f"autocast-{spec.autocast}"
    for value in (spec.model_cast, spec.model_dtype, spec.input_dtype, spec.format_dtype,
                  spec.map_dtype):
        if value in ("float16", "bfloat16"):
            return value
    return "float16"


def parse_variant(name: str) -> str:
    """A variant's canonical name; its dtype may be written fp16, half, bf16 as elsewhere."""
    from .bench import canonical_variant

    return canonical_variant(name, "drift", VARIANTS)


def variant_specs(spec: PipelineSpec, variant: str) -> tuple[PipelineSpec, PipelineSpec]:
    """(float32 spec, variant spec): bench's variants (the precision, not the pipeline's
    casting mistakes), with the user's model_cast following the variant and the islands kept."""
    from .bench import variant_spec

    reference = variant_spec(spec, "float32").replace(model_cast=None)
    half = variant_spec(spec, variant)
    cast = variant if spec.model_cast and variant in ("float16", "bfloat16") else None
    return reference, half.replace(model_cast=cast)


# -- the run ----------------------------------------------------------------------------------

def drift(spec: PipelineSpec, variant: str | None = None, progress=None, cancel=None,
          islands: bool = True) -> DriftResult:
    """float32 and `variant` on the same batch, compared module by module.

    The batch is built once (float32) and cast for the variant as the pipeline would. When the
    variant overflows or drifts, the finding's first fix is the float32 islands that bring it
    back (`islands=False` skips that search). Raises InputError for bad input and Cancelled.
    """
    import time

    from .data import PipelineFailure
    from .pipeline import DeviceUnavailable, prepare_batch, prepare_model, primary_output

    variant = parse_variant(variant) if variant else default_variant(spec)
    ref_spec, var_spec = variant_specs(spec, variant)
    timings: dict = {}
    start = time.perf_counter()
    try:
        ref_loaded, processor = prepare_model(ref_spec, progress)
    except DeviceUnavailable:
        raise InputError(f"device {spec.device!r} is not available on this machine") from None
    device = ref_loaded.device
    result = DriftResult(variant=variant, device=str(device), timings=timings)
    check_cancel(cancel)
    try:
        build = prepare_batch(ref_spec, ref_loaded, processor, progress, cancel)
    except PipelineFailure as failure:  # the user's data steps failed: nothing to compare
        result.error = _error(failure.exc, "batch")
        return result
    timings["float32 load"] = round(time.perf_counter() - start, 4)
    report_progress(progress, "forward", "float32 forward pass")
    reference = Recorder(ref_loaded.model, keep=True, inputs=islands)
    ref_output, result.error = _traced_forward(ref_spec, ref_loaded, build.batch, reference,
                                               "float32 forward")
    if result.error:
        return result
    check_cancel(cancel)
    start = time.perf_counter()
    report_progress(progress, "model", f"loading {spec.model} for {variant}")
    var_loaded, _ = prepare_model(var_spec, progress)
    var_batch = cast_batch(build.batch, var_spec.input_dtype)
    report_progress(progress, "forward", f"{variant} forward pass")
    compared = Recorder(var_loaded.model, against=reference.kept)
    var_output, result.error = _traced_forward(var_spec, var_loaded, var_batch, compared,
                                               f"{variant} forward")
    reference.kept.clear()
    timings[variant] = round(time.perf_counter() - start, 4)
    if result.error:
        return result
    result.modules = module_drifts(reference, compared)
    diverged = diverged_modules(result.modules, compared)
    result.first_divergent = (diverged[0] or "model") if diverged else None
    result.output = output_drift(ref_output, var_output)
    result.ok = within_tolerance(result.output)
    if not result.ok:
        search = None
        if islands and var_spec.model_dtype in ("float16", "bfloat16") and not var_spec.autocast:
            from .islands import search_islands

            check_cancel(cancel)
            report_progress(progress, "islands", "searching float32 islands")
            start = time.perf_counter()
            try:
                search = search_islands(
                    var_spec, var_loaded.model, var_batch, ref_loaded.model,
                    reference_calls=reference.calls, reference_output=ref_output,
                    diverged=diverged, cancel=cancel)
            except Cancelled:
                raise
            except Exception:  # noqa: BLE001 - the search is an extra: the comparison stands
                search = None
            timings["islands"] = round(time.perf_counter() - start, 4)
        tensor = primary_output(var_output)[1]
        dtype = str(tensor.dtype).replace("torch.", "") if tensor is not None else variant
        result.findings = [drift_finding(spec, result, dtype, search)]
    return result


def _traced_forward(spec, loaded, batch, recorder, stage):
    """(output, None), or (None, error document) when the pipeline's forward pass fails."""
    from .pipeline import run_forward

    try:
        with recorder:
            return run_forward(spec, loaded.model, batch, loaded.device), None
    except Exception as exc:  # noqa: BLE001 - the run failed: say why, no comparison
        return None, _error(exc, stage)


def _error(exc, stage) -> dict:
    return {"type": type(exc).__name__, "message": first_line(exc, 500), "stage": stage}


def cast_batch(batch: dict, dtype: str | None) -> dict:
    """The batch as `input_dtype` / `input_cast: floating` gives it: floating tensors cast."""
    from . import dtypes

    if not dtype:
        return batch
    target = dtypes.to_torch(dtype)
    return {k: v.to(target) if getattr(v, "is_floating_point", lambda: False)() else v
            for k, v in batch.items()}


def drift_finding(spec: PipelineSpec, result: DriftResult, dtype: str, search) -> Finding:
    """`overflow` when the variant's output is not finite, else `precision-drift`."""
    from .islands import islands_fix
    from .rules import FP16_MAX, Evidence, fix_model_dtype

    output = result.output
    location = result.first_divergent or "model"
    module = next((m for m in result.modules if (m.name or "model") == location), None)
    # The model-wide fixes, as the diagnosis words them.
    ev = Evidence(spec=spec, device_type=result.device.split(":")[0], param_dtypes={},
                  module_param_dtypes={})
    fixes = [islands_fix(spec, search)] if search is not None else []
    evidence = {"variant": result.variant, "output sqnr dB": output["sqnr_db"],
                "output cosine": output["cosine"], "output max abs diff": output["max_abs_diff"],
                "tolerance sqnr dB": DRIFT_SQNR_DB}
    if module is not None:
        evidence |= {"float32 abs-max": module.abs_max_float32,
                     f"{result.variant} abs-max": module.abs_max_variant,
                     "non-finite values": module.nonfinite, "module sqnr dB": module.sqnr_db}
    if search is not None:
        evidence |= search.evidence()
    if not output["finite"]:
        if dtype == "float16":
            fixes.append(fix_model_dtype("bfloat16", ev))
        message = (f"The {result.variant} run's output holds {output['nonfinite']} inf/NaN "
                   f"values; they first appear in the output of {location}"
                   + (f", past float16's {FP16_MAX:.0f}" if dtype == "float16" else "") + ".")
        code, severity = "overflow", "error"
    else:
        message = (f"The {result.variant} run is finite but its output drifts from float32 "
                   f"(SQNR {output['sqnr_db']:.1f} dB, under the {DRIFT_SQNR_DB:.0f} dB "
                   f"tolerance); the first module whose output parts from float32 is "
                   f"{location}.")
        code, severity = "precision-drift", "warning"
    fixes.append(fix_model_dtype("float32", ev))
    if search is not None:
        message += " " + search.summary()
    return Finding(code, severity, location, message, evidence, tuple(fixes))


# -- human output -------------------------------------------------------------------------------

def format_drift(doc: dict) -> str:
    """The drift document for people: the verdict, the output, the modules that parted, and
    each finding with its fixes."""
    from .presentation import finding_lines

    lines = [f"float32 against {doc['variant']} on {doc['device']}: "
             + ("within tolerance" if doc["ok"] else "NOT within tolerance")]
    if doc["error"]:
        lines.append(f"  the {doc['variant']} run failed: {doc['error']['message']}")
        return "\n".join(lines)
    out = doc["output"]
    lines.append(f"  output {out['name']}: " + (
        f"SQNR {out['sqnr_db']:.1f} dB, cosine {out['cosine']:.6f}, max |diff| "
        f"{out['max_abs_diff']:.3g}" if out["finite"] else f"{out['nonfinite']} inf/NaN values"))
    parted = [m for m in doc["modules"] if m["nonfinite"] or
              (m["sqnr_db"] is not None and m["sqnr_db"] < DRIFT_SQNR_DB)]
    if doc["first_divergent"]:
        lines.append(f"  first module to part from float32: {doc['first_divergent']} "
                     f"({len(parted)} of {len(doc['modules'])} module calls parted)")
    for finding in doc["findings"]:
        lines += finding_lines(finding)
    return "\n".join(lines)
