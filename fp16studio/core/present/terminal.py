"""Results as the command line prints them: the diagnosis, a trace, a fix, a benchmark table,
drift, an inspection. Each takes the command's typed result, the one its --json document is
written from, so what a person reads and what a script reads come from one run."""

from __future__ import annotations

import os
import textwrap

from ..common.units import format_bytes
from ..diagnostics.findings import Finding
from ..diagnostics.report import Diagnosis, FixRun, ModelOutput
from ..hf.model_info import ModelInventory
from ..precision.bench import BenchResult, VariantResult
from ..precision.drift import DRIFT_SQNR_DB, DriftResult
from ..precision.fp8_plan import Fp8Plan
from ..script.trace import ScriptTrace
from ..precision.measure import STABLE_SPREAD
from ..spec.value import PipelineSpec
from . import vocabulary
from .code_wrap import wrap_code


def finding_lines(finding: Finding, where: str = "") -> list[str]:
    """A finding as the command line prints it: a blank line, the code at its location (`where`
    adds e.g. the script line), the message wrapped, then each fix, first one first, with the
    code to write under it."""
    lines = ["", f"{finding.severity.upper():8}{finding.code}  at {finding.location}{where}"]
    lines += textwrap.wrap(finding.message, 96, initial_indent=" " * 8,
                           subsequent_indent=" " * 8)
    for i, fix in enumerate(finding.fixes):
        lines.append(f"        {'fix' if i == 0 else 'or '}: {fix.title}  [{fix.id}]")
        # every line of the code under the title (its own indentation is the script's)
        lines += textwrap.indent(wrap_code(textwrap.dedent(fix.code_text()), 120 - 13),
                                 " " * 13).splitlines()
    return lines


def _output_line(out: ModelOutput) -> str:
    finite = "" if out.finite is not False else ", NOT finite"
    return f"  output {out.name}: {out.dtype} {out.shape}{finite}"


def format_diagnosis(diagnosis: Diagnosis) -> str:
    """Human-readable diagnosis: the verdict, then each finding with its fixes."""
    lines = []
    error = diagnosis.error
    verdict = "ok" if diagnosis.ok else "problems found"
    lines.append(f"{diagnosis.spec.model} on {diagnosis.device}: {verdict}")
    if error:
        where = f" in {error.module}" if error.module else ""
        lines += _wrapped(f"the pipeline failed at {error.stage}{where}: {error.message}", "  ")
    if diagnosis.output is not None:
        lines.append(_output_line(diagnosis.output))
    steps = vocabulary.steps_summary(diagnosis.steps)
    if steps:
        lines.append(f"  {steps}")
    for finding in diagnosis.findings:
        lines += finding_lines(finding)
    inv = diagnosis.totals
    if inv.tensors:
        by_dtype = ", ".join(f"{n} {d}" for d, n in sorted(inv.dtypes.items()))
        lines.append("")
        lines.append(f"inventory: {inv.parameters:,} parameters, {inv.tensors} tensors, "
                     f"{format_bytes(inv.bytes)} ({by_dtype})")
    return "\n".join(lines)


def format_trace(trace: ScriptTrace, scopes=None, error_said: str = "") -> str:
    """Human-readable trace: the verdict, the models that ran, each finding at its script line
    (`scopes`: words after each finding's location, a launched run's ranks; `error_said`: before
    the failure's message, whose rank it was)."""
    name = os.path.basename(trace.script)
    # "unknown": the script's process ended before it said where its models ran.
    where = f" on {trace.device}" if trace.device != "unknown" else ""
    lines = ["", f"{name}{where}: {'ok' if trace.ok else 'problems found'}"]
    for model in trace.models:
        lines.append(f"  model {model['name']} ({model['class']}): {model['calls']} call(s)")
    error = trace.error
    if error:
        where = f" in {error.module}" if error.module else ""
        lines += _wrapped(f"failed{where}{at_line(error.source)}: {error_said}"
                          f"{error.message}", "  ")
    if trace.output is not None:
        lines.append(_output_line(trace.output))
    steps = vocabulary.steps_summary(trace.steps)
    if steps:
        lines.append(f"  {steps}")
    lines.extend(f"  note: {note}" for note in trace.notes)
    scopes = scopes or ()
    for i, finding in enumerate(trace.findings):
        scope = f" ({scopes[i]})" if i < len(scopes) else ""
        lines += finding_lines(finding, scope + at_line(finding.source))
    if trace.recovered_spec is not None:
        defaults = PipelineSpec(model="", dataset="").to_dict()
        said = ", ".join(f"{key}={value}" for key, value in trace.recovered_spec.to_dict().items()
                         if value != defaults[key])
        lines.append("")
        lines.append(f"recovered pipeline spec: {said}")
        lines.append("  (the \"spec\" of --json is a spec file: fp16studio fix takes over from it)")
    return "\n".join(lines)


def at_line(source) -> str:
    return f" ({os.path.basename(source['file'])}:{source['line']})" if source else ""


# The columns the terminal shows, of the one table of bench columns (present.vocabulary) and
# the verdict's, with shorter headers where the long one would widen the table; the rest of the
# figures go on lines under it, so the table fits 120 columns.
TERMINAL_COLUMNS = {"Variant": "Variant", "Samples/s": "Samples/s", "vs float32": "vs fp32",
                    "p50 ms": "p50 ms", "Busy ms": "Busy ms", "Bound": "Bound",
                    "Spread": "Spread", "Peak memory": "Peak memory", "Weights": "Weights",
                    "Max |diff| vs fp32": "|diff| fp32", "Top-1 agreement": "Top-1"}
# Marks an unstable figure's row (its rounds lay further apart than STABLE_SPREAD).
UNSTABLE_MARK = "!"


def format_bench(result: BenchResult) -> str:
    """A bench result as a table for people (the `--json`-less CLI output)."""
    name = result.device_name
    lines = [f"device: {result.device}" + (f" ({name})" if name else "")]
    tf32 = result.tf32
    if tf32 is not None and result.device.startswith("cuda"):
        on = {True: "on", False: "off"}
        lines.append(f"float32 baseline: TF32 matmul {on[tf32.cuda_matmul_allow_tf32]}"
                     f", cuDNN TF32 {on[tf32.cudnn_allow_tf32]}"
                     f", float32 matmul precision {tf32.float32_matmul_precision}")
    batch = result.batch
    if batch:
        lines.append(f"batch: {batch.size} samples"
                     + (f", {batch.tokens} tokens" if batch.tokens else ""))
    order = list(TERMINAL_COLUMNS)
    columns = sorted((c for c in vocabulary.bench_columns(result) if c[0] in TERMINAL_COLUMNS),
                     key=lambda c: order.index(c[0]))
    header = tuple(TERMINAL_COLUMNS[title] for title, *_ in columns)
    rows = [header]
    failures = []
    for v in result.variants:
        if not v.ok:
            status = vocabulary.status(v)
            rows.append((v.name, status) + ("",) * (len(header) - 2))
            if status == "failed":  # unsupported: said under "support:"
                failures.append(f"{v.name}: {v.error or 'failed'}")
            continue
        mark = f" {UNSTABLE_MARK}" if vocabulary.stability(v) == "noisy" else ""
        rows.append((v.name + mark,) + tuple(
            "-" if raw(v) in (None, "") else text(raw(v)) for _, raw, text, _ in columns[1:]))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header))]
    lines.append("")
    for row in rows:
        lines.append("  ".join(str(c).ljust(w) if i == 0 else str(c).rjust(w)
                               for i, (c, w) in enumerate(zip(row, widths))).rstrip())
    lines.append("")
    if result.verdict:
        lines += _wrapped(f"verdict: {result.verdict}")
    for finding in result.findings:
        lines += finding_lines(finding)
    for v in result.variants:
        if v.ok:
            lines += _wrapped(v.verdict or v.name, "  ")
            details = bench_details(result, v)
            if details:
                lines += _wrapped(details, "      ")
    for note in vocabulary.bench_notes(result):
        lines += _wrapped(f"{note}.")
    unstable = [v.name for v in result.variants if vocabulary.stability(v) == "noisy"]
    if unstable:
        lines += _wrapped(f"{UNSTABLE_MARK} UNSTABLE ({', '.join(unstable)}): these figures moved "
                          f"more than {STABLE_SPREAD:.0%} between rounds (other load, clocks "
                          "or the host's own jitter): do not trust them, measure again, for "
                          "longer or on a quieter machine")
    notes = [f"{v.name}: {v.support}, {v.support_note}" for v in result.variants
             if v.support_note]
    for title, items in (("support:", notes), ("failed:", failures)):
        if items:
            lines.append(title)
            for item in items:
                lines += _wrapped(item, "  ")
    if result.reference_error:
        lines.append(f"no float32 reference: {result.reference_error}")
    if result.note:
        lines += _wrapped(f"note: {result.note}")
    return "\n".join(lines)


# The figures that are not columns, under each variant's verdict: (header, its words).
_DETAILS = {"p90 ms": "p90 {} ms", "min ms": "min {} ms", "Overhead ms": "overhead {} ms",
            "Kernels vs fp32": "kernels {} float32's", "TFLOP/s": "{} TFLOP/s",
            "% of peak": "{} of peak",
            "Cosine vs fp32": "cosine vs fp32 {}", "inf/NaN outputs": "{} inf/NaN outputs",
            "Tokens/s": "{} tokens/s"}


def bench_details(result: BenchResult, v: VariantResult) -> str:
    """A variant's figures that are not table columns, in a line."""
    columns = {title: (raw, text) for title, raw, text, _ in vocabulary.bench_columns(result)}
    return ", ".join(words.format(columns[title][1](columns[title][0](v)))
                     for title, words in _DETAILS.items()
                     if title in columns and columns[title][0](v) not in (None, ""))


def _wrapped(text: str, indent: str = "") -> list[str]:
    return textwrap.wrap(text, 118, initial_indent=indent, subsequent_indent=indent + "  ")


def format_drift(result: DriftResult) -> str:
    """The drift result for people: the verdict, the output, the modules that parted, and
    each finding with its fixes."""
    lines = [f"float32 against {result.variant} on {result.device}: "
             + ("within tolerance" if result.ok else "NOT within tolerance")]
    if result.error:
        lines.append(f"  the {result.variant} run failed: {result.error.message}")
        return "\n".join(lines)
    out = result.output
    lines.append(f"  output {out.name}: " + (
        f"SQNR {out.sqnr_db:.1f} dB, cosine {out.cosine:.6f}, max |diff| "
        f"{out.max_abs_diff:.3g}" if out.finite else f"{out.nonfinite} inf/NaN values"))
    parted = [m for m in result.modules if m.nonfinite or
              (m.sqnr_db is not None and m.sqnr_db < DRIFT_SQNR_DB)]
    if result.first_divergent:
        lines.append(f"  first module to part from float32: {result.first_divergent} "
                     f"({len(parted)} of {len(result.modules)} module calls parted)")
    for finding in result.findings:
        lines += finding_lines(finding)
    return "\n".join(lines)


def format_fix(run: FixRun, output: str) -> str:
    """`fix`: each round's fix, the final diagnosis, and the verdict with where the spec went."""
    lines = [f"round {step['round']}: {step['code']} -> applied {step['fix']}" for step in run.applied]
    lines.append(format_diagnosis(run))
    verdict = ("NOT fixed" if not run.ok else "fixed" if run.applied
               else "nothing to fix, the run is clean")
    lines.append(f"\n{verdict}; spec written to {output}")
    return "\n".join(lines)


def format_inspect(model: ModelInventory, dtype: str | None = None) -> str:
    """`inspect`: size per dtype (`dtype` marked), checkpoint dtypes, the largest layer."""
    lines = [f"{model.model}: {model.architecture}, {model.parameters:,} parameters in "
             f"{model.tensors} tensors"]
    for name, size in model.memory_bytes.items():
        mark = "  <-" if name == dtype else ""
        lines.append(f"  {name:>9}: {format_bytes(size)}{mark}")
    if model.checkpoint_dtypes:
        lines.append("  checkpoint: " + ", ".join(f"{n} {d}" for d, n in model.checkpoint_dtypes.items()))
    largest = model.largest_layer
    lines.append(f"  largest layer: {largest['name']} ({format_bytes(largest['bytes'])})")
    if model.keep_fp32_modules:
        lines.append("  kept in float32 by the model: " + ", ".join(model.keep_fp32_modules))
    return "\n".join(lines)


def format_fp8(plan: Fp8Plan) -> str:
    """`fp8`: the verdict, the pre-flight checks, one row per Linear layer (within 120
    columns), then each finding with its fixes."""
    layers = plan.layers
    where = plan.device + (" (emulated)" if plan.emulated else "")
    lines = [f"FP8 plan ({plan.recipe}) on {where}: {len(plan.converted)} of {len(layers)} "
             f"Linear layers to FP8, {len(plan.keep_bf16)} kept in bfloat16 (SQNR under "
             f"{plan.threshold_db:g} dB)"]
    for check in plan.preflight:
        lines += textwrap.wrap(f"{check['check']}: {check['message']}", 110,
                               initial_indent=f"  {'ok' if check['ok'] else '!!':2}  ",
                               subsequent_indent=" " * 6)
    name_width = min(40, max((len(layer.name) for layer in layers), default=5))
    lines += ["", f"  {'layer':{name_width}}  {'in x out':>11}  {'share':>6}  {'w amax':>8}  "
                  f"{'x amax':>8}  {'under':>6}  {'SQNR dB':>7}  plan"]
    for layer in layers:
        name = layer.name
        if len(name) > name_width:   # whole, on a line of its own, its figures under it
            lines.append(f"  {name}")
            name = ""
        # Short: the shape is in its own column, the whole reason in the findings and --json.
        reason = ("shape" if "not divisible" in layer.reason else "too small"
                  if layer.reason.startswith("too small") else "did not run")
        plan_said = ("bf16: sensitive" if layer.keep_bf16 else "FP8" if layer.eligible
                     else f"bf16: {reason}")
        line = (
            f"  {name:{name_width}}  {layer.in_features:>5}x{layer.out_features:<5}  "
            f"{vocabulary.number(layer.flops_share, '{:.1%}'):>6}  "
            f"{vocabulary.number(layer.weight_amax, '{:.3g}'):>8}  "
            f"{vocabulary.number(layer.input_amax, '{:.3g}'):>8}  "
            f"{vocabulary.number(layer.underflow_share, '{:.1%}'):>6}  "
            f"{vocabulary.number(layer.sqnr_db, '{:.1f}', '-'):>7}  {plan_said}")
        lines.append(line if len(line) <= 120 else line[:119] + "…")
    shares = [layer.sample_share for layer in layers if layer.sample_share is not None]
    if shares and min(shares) < 1:
        lines.append(f"  under, SQNR: estimated on a sample of each layer's output, down to "
                     f"{min(shares):.1%} of it (--json: sample_share)")
    for finding in plan.findings:
        lines += finding_lines(finding)
    return "\n".join(lines)
