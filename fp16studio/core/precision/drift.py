"""Drift, module by module (`fp16studio drift`): the pipeline in float32 and in a half variant on
the same batch, each module's output compared where both runs produced it.

The recording and the comparing are `run.compare`'s (the float32-islands search uses them too),
the distances `run.distance`'s. The result is a plain snapshot (numbers and strings) the window
can show and pickle.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..common.codec import Document, meta
from ..common.errors import (Cancelled, InputError, check_cancel, raise_if_disk_full,
                             report_progress)
from ..diagnostics.findings import Finding
from ..diagnostics.report import RunError
from ..diagnostics.rules.ranges import drift_finding, drift_reference_broken
from ..run.compare import (DRIFT_SQNR_DB, OutputDrift, OutputRecorder, cast_batch, output_drift,
                           within_tolerance)
from ..spec.value import PipelineSpec

VARIANTS = ("float16", "bfloat16", "autocast-float16", "autocast-bfloat16")


@dataclass
class ModuleDrift(Document):
    """One call of one module, float32 against the variant (`drift --json`'s `modules`)."""

    name: str
    cls: str = field(metadata=meta(key="class"))
    call: int                          # which call of this module (0 for the first)
    max_abs_diff: float | None         # distances: None where the variant holds inf/NaN
    cosine: float | None
    sqnr_db: float | None
    abs_max_float32: float | None
    abs_max_variant: float | None      # over the variant's finite values
    nonfinite: int                     # inf/NaN values in the variant's output

    @property
    def diverged(self) -> bool:
        return self.nonfinite > 0 or (self.sqnr_db is not None and self.sqnr_db < DRIFT_SQNR_DB)


@dataclass
class DriftResult(Document):
    """The `drift --json` document (CONTRACT §3), plus findings, the error and timings."""

    __json_computed__ = ("reference",)

    variant: str
    device: str
    ok: bool = False
    first_divergent: str | None = None
    output: OutputDrift | None = None
    modules: list[ModuleDrift] = field(default_factory=list)   # in call order
    findings: list[Finding] = field(default_factory=list)      # precision-drift / overflow
    error: RunError | None = None    # when a run failed
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def reference(self) -> str:
        return "float32"


def module_drifts(reference: OutputRecorder, variant: OutputRecorder) -> list[ModuleDrift]:
    """One ModuleDrift per call the variant compared, in call order."""
    absmax32 = {(r["name"], r["call"]): r.get("out_absmax") for r in reference.calls}
    return [ModuleDrift(name=row["name"], cls=row["cls"], call=row["call"],
                        max_abs_diff=row["max_abs_diff"], cosine=row["cosine"],
                        sqnr_db=row["sqnr_db"],
                        abs_max_float32=absmax32.get((row["name"], row["call"])),
                        abs_max_variant=row["out_absmax"], nonfinite=row["nonfinite"])
            for row in variant.calls if "nonfinite" in row]


def diverged_modules(modules: list[ModuleDrift], variant: OutputRecorder) -> list[str]:
    """The modules whose output parted from float32, in the order they *returned* (inner
    modules return before outer ones): the first is where the drift starts."""
    finished = {(r["name"], r["call"]): r.get("finished", -1) for r in variant.calls}
    diverged = sorted((m for m in modules if m.diverged),
                      key=lambda m: finished[(m.name, m.call)])
    return list(dict.fromkeys(m.name for m in diverged))


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

    from ..common.errors import PipelineFailure
    from ..run.pipeline import DeviceUnavailable, prepare_batch, prepare_model, primary_output

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
    reference = OutputRecorder(ref_loaded.model, keep=True, inputs=islands)
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
    compared = OutputRecorder(var_loaded.model, against=reference.kept)
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
    reference_tensor = primary_output(ref_output)[1]
    if reference_tensor is not None and not bool(reference_tensor.isfinite().all()):
        result.ok = False
        result.findings = [drift_reference_broken(result)]
    elif not result.ok:
        search = None
        if islands and var_spec.model_dtype in ("float16", "bfloat16") and not var_spec.autocast:
            from ..diagnostics.islands import search_islands

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
    """(output, None), or (None, error document) when the pipeline's forward pass fails; under
    no_grad, whose version counters let the recorder measure an unchanged tensor once."""
    from ..run.pipeline import no_tensor, primary_output, run_forward

    try:
        with recorder:
            output = run_forward(spec, loaded.model, batch, loaded.device, inference=False)
    except Exception as exc:  # noqa: BLE001 - the run failed: say why, no comparison
        return None, _error(exc, stage)
    if primary_output(output)[1] is None:
        return None, RunError("NoTensorOutput", no_tensor(output), stage)
    return output, None


def _error(exc, stage) -> RunError:
    raise_if_disk_full(exc)   # not the run's failure: the user's disk
    return RunError.raised(exc, stage)
