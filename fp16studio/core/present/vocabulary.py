"""How results read, everywhere: severity colours, the palette, the diagnosis stages, the
benchmark columns and None-aware formatters (the severity order is the findings' own). The
window, the HTML report and the command line all take them from here, so they agree.

Colours are Okabe–Ito (distinguishable under the common colour-vision deficiencies), and colour
is never the only signal: severities and dtypes are always written out too.
"""

from __future__ import annotations

import json
import math

from ..common.units import format_bytes
from ..diagnostics.findings import SEVERITIES
from ..precision.bench import BenchResult, VariantResult
from ..precision.verdict import VERDICT_COLUMNS

OKABE_ITO = {
    "orange": "#E69F00",
    "sky_blue": "#56B4E9",
    "bluish_green": "#009E73",
    "yellow": "#F0E442",
    "blue": "#0072B2",
    "vermillion": "#D55E00",
    "reddish_purple": "#CC79A7",
    "grey": "#999999",
}

SEVERITY_COLORS = {
    "error": OKABE_ITO["vermillion"],
    "warning": OKABE_ITO["orange"],
    "info": OKABE_ITO["blue"],
    "ok": OKABE_ITO["bluish_green"],
}

# The diagnosis stages in order (core.diagnostics.diagnosis reports them), as a progress bar words them.
STAGES = {"model": "Loading model", "dataset": "Reading dataset", "batch": "Building batch",
          "forward": "Forward pass", "rules": "Checking findings"}


def severity_counts(findings) -> str:
    """'1 error · 2 warnings', the kinds present only."""
    counts = {s: 0 for s in SEVERITIES}
    for f in findings:
        counts[f.severity] += 1
    return " · ".join(count(n, s) for s, n in counts.items() if n)


def count(n: int, noun: str, plural: str | None = None) -> str:
    """'1 tensor', '2 tensors', '1,024 tensors' (`plural` where adding an s is wrong)."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


# -- None-aware formatters -----------------------------------------------------------------------
def number(value, pattern: str = "{:,.4g}", missing: str = "") -> str:
    """`pattern` applied to a number; `missing` for None or anything that is not a number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return missing
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return pattern.format(value)


def size(count, missing: str = "") -> str:
    return format_bytes(count) if isinstance(count, (int, float)) and not isinstance(count, bool) else missing


def shape(dims) -> str:
    """A tensor's shape: `(4, 128)`, `scalar` for none; "" when unknown."""
    if dims is None:
        return ""
    return "(" + ", ".join(str(d) for d in dims) + ")" if dims else "scalar"


def steps_summary(steps) -> str:
    """A trace's training steps in one line: the loss of each, and where inf/NaN first came
    (the `steps` of a trace document); "" for a script that only infers."""
    if not steps:
        return ""
    losses = ", ".join(f"{s.index}: " + (number(s.loss) if s.finite else "inf/NaN")
                       for s in steps)
    first = next((s for s in steps if s.first_nonfinite), None)
    if first is None:
        return f"Training steps (loss): {losses}; all finite"
    where = first.first_nonfinite
    return (f"Training steps (loss): {losses}; inf/NaN first at step {first.index}, "
            f"{where.phase}, {where.location}")


def spec_value(value) -> str:
    """A spec value as a person reads it: null as an em dash, lists comma-separated (applied
    fixes by id), objects as key=value."""
    if value is None:
        return "—"
    if isinstance(value, (list, tuple)):
        return ", ".join(spec_value(x) if not isinstance(x, dict) else x.get("id", str(x))
                         for x in value) or "[]"
    if isinstance(value, dict):
        return ", ".join(f"{k}={x}" for k, x in value.items()) or "{}"
    return str(value)


def evidence_value(value) -> str:
    """An evidence value as a person reads it: lists comma-separated, mappings as `key: value`,
    numbers short; never raw JSON punctuation."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return number(value)
    if isinstance(value, dict) and {"dtype", "from"} <= value.keys():   # a dtype's provenance
        from ..diagnostics.rules.words import origin_phrase

        return f"{value['dtype']}, because {origin_phrase(value)}"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {evidence_value(v)}" for k, v in value.items()) or "—"
    if isinstance(value, (list, tuple)):
        if value and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return shape(value)
        return ", ".join(evidence_value(v) for v in value) or "—"
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str)


# What a benchmark's less obvious figures mean, said wherever they are shown.
MEMORY_NOTES = {
    "cpu-live-tensors": "Peak memory: the weights plus the most the forward pass's tensors held at "
                        "once, counted by torch (not the process's resident memory, which holds "
                        "the interpreter, torch and every variant alike)",
    "cuda-max-allocated": "Peak memory: the weights plus the most the forward pass added to "
                          "torch.cuda.max_memory_allocated; the JSON also has the allocator's "
                          "reserved memory and NVML's device-wide figure",
    "process-rss": "Peak memory: the process's resident memory, sampled between calls (a "
                   "document from an older version)",
}


def bench_notes(result: BenchResult) -> list[str]:
    """The sentences that explain a bench result's memory and spread figures."""
    from ..precision.measure import STABLE_SPREAD

    kinds = {v.memory_kind for v in result.variants if v.ok}
    notes = [MEMORY_NOTES[kind] for kind in sorted(kinds, key=str) if kind in MEMORY_NOTES]
    if any(v.spread is not None for v in result.variants):
        notes.append("Spread: how far apart the rounds' median latencies lie, (slowest - fastest) "
                     f"/ median; above {STABLE_SPREAD:.0%} something moved the figure between "
                     "rounds (other load, clocks, the host's own jitter) and it is not to be "
                     "trusted")
    return notes


# -- the benchmark table -------------------------------------------------------------------------
def status(variant: VariantResult) -> str:
    """"ok", "unsupported" (the device cannot run the variant: decided before running, not
    tried) or "failed"."""
    if variant.ok:
        return "ok"
    return "unsupported" if variant.support == "unsupported" else "failed"


def stability(variant: VariantResult) -> str:
    """"stable", or "noisy" when the spread says the machine was busy and the figure is not to
    be trusted; "" for a failed variant or a document that predates the `stable` key."""
    if not variant.ok or variant.stable is None:
        return ""
    return "stable" if variant.stable else "noisy"


def _drift(v: VariantResult):
    return None if v.nonfinite_outputs else v.max_abs_diff_vs_float32


def _fmt(pattern):
    return lambda x: number(x, pattern)


def _latency(key: str):
    return lambda v: getattr(v.latency_ms, key) if v.latency_ms is not None else None


def _every_column(vs_float32) -> tuple:
    """Every bench column, shared then the verdict's; `vs_float32` gives a variant's speed-up
    (the result's: it needs float32's figure)."""
    return (
        ("Variant", lambda v: v.name, str, True),
        ("Status", status, str, True),
        ("Stability", stability, str, False),
        ("Support", lambda v: v.support, lambda x: x or "", False),
        ("Samples/s", lambda v: v.samples_per_s, _fmt("{:,.1f}"), True),
        ("vs float32", vs_float32, _fmt("{:.2f}×"), True),
        ("Spread", lambda v: v.spread, _fmt("{:.1%}"), False),
        ("Tokens/s", lambda v: v.tokens_per_s, _fmt("{:,.0f}"), False),
        ("p50 ms", _latency("p50"), _fmt("{:.2f}"), True),
        ("p90 ms", _latency("p90"), _fmt("{:.2f}"), True),
        ("min ms", _latency("min"), _fmt("{:.2f}"), True),
        ("First call ms", lambda v: v.first_call_ms, _fmt("{:.1f}"), False),
        ("Peak memory", lambda v: v.peak_memory_bytes, size, True),
        ("Weights", lambda v: v.weights_bytes, size, True),
        ("TFLOP/s", lambda v: v.tflops, _fmt("{:.3g}"), False),
        ("% of peak", lambda v: v.peak_fraction, _fmt("{:.1%}"), False),
        ("Max |diff| vs fp32", _drift, _fmt("{:.3g}"), True),
        ("Cosine vs fp32", lambda v: v.cosine_vs_float32, _fmt("{:.6f}"), False),
        ("Top-1 agreement", lambda v: v.top1_agreement, _fmt("{:.1%}"), True),
        ("inf/NaN outputs", lambda v: v.nonfinite_outputs, _fmt("{:d}"), False),
        ("Error", lambda v: v.error, lambda x: x or "", True),
    ) + VERDICT_COLUMNS


def bench_columns(result: BenchResult) -> tuple:
    """The columns worth showing for a bench result, each (header, raw value of a variant, text
    of that value, shown when absent): the always-shown ones, and each optional one that some
    variant fills (a document from an older version lacks the newer keys). Raw values feed
    sorting and CSV exports."""
    return tuple(c for c in _every_column(result.vs_float32)
                 if c[3] or any(c[1](v) not in (None, "") for v in result.variants))
