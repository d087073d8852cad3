"""A self-contained HTML report of one run, to share with a colleague.

Rendered from the typed results (a Diagnosis or a ScriptTrace, a BenchResult), which a saved
session's documents are read back into, so a report can be made without the model. One file:
inline CSS, charts as inline SVG bars, no scripts, nothing fetched. Every value that came from
the user or the model is escaped. The markup is also well-formed XML (closed tags, XML-safe
entities), which lets tests parse it strictly.
"""

from __future__ import annotations

import textwrap
from datetime import datetime, timezone
from html import escape

from ... import __version__
from ..diagnostics.findings import Finding, by_severity
from ..diagnostics.report import Diagnosis, Environment, ModelOutput, RunError
from ..diagnostics.tree import Inventory
from ..precision.bench import BenchResult
from ..script.trace import ScriptTrace
from ..spec.value import PipelineSpec
from .terminal import bench_details
from .vocabulary import (OKABE_ITO, SEVERITY_COLORS, bench_columns, bench_notes,
                         evidence_value, size, stability)

# Okabe–Ito, the window's palette; severity is always spelled out too, never colour alone.
OK_COLOUR = SEVERITY_COLORS["ok"]
BAR_COLOUR = OKABE_ITO["blue"]

_CSS = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2rem auto; max-width: 60rem;
       padding: 0 1rem; color: #1d1d1f; background: #fff; }
h1 { font-size: 1.5rem; margin-bottom: .25rem; } h2 { margin-top: 2rem; font-size: 1.2rem; }
.meta { color: #555; } code, pre { font: 13px ui-monospace, monospace; }
pre { background: #f4f4f6; padding: .5rem; overflow-x: auto; white-space: pre-wrap; }
table { border-collapse: collapse; margin: .5rem 0; }
.wide { overflow-x: auto; max-width: 100%; }
.wide table { font-size: 13px; } .wide th { white-space: normal; vertical-align: bottom; }
th, td { text-align: left; padding: .25rem .75rem .25rem 0; border-bottom: 1px solid #ddd;
         vertical-align: top; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.badge { display: inline-block; padding: 0 .5rem; border-radius: .75rem; color: #fff;
         font-weight: 600; font-size: .8rem; text-transform: uppercase; }
.finding { border-left: 4px solid #999; padding: .25rem 0 .25rem 1rem; margin: 1rem 0; }
.finding h3 { margin: 0; font-size: 1rem; }
svg text { font: 12px system-ui, sans-serif; fill: #1d1d1f; }
@media (prefers-color-scheme: dark) {
  body { color: #e8e8ea; background: #1c1c1e; } .meta { color: #aaa; }
  pre { background: #2c2c2e; } th, td { border-color: #444; } svg text { fill: #e8e8ea; }
}
"""


# In every report's head: how the command line knows a file it may replace is a report.
SIGNATURE = "<title>fp16studio report: "


def render_report(diagnosis: Diagnosis, bench: BenchResult | None = None) -> str:
    """The HTML text of a report for one diagnosis (or a script's trace) and, optionally, its
    benchmark."""
    # A trace's spec is the one recovered from the script, if any (its document's `spec`).
    spec = diagnosis.recovered_spec if isinstance(diagnosis, ScriptTrace) else diagnosis.spec
    title = f"fp16studio report: {spec.model if spec is not None else 'pipeline'}"
    parts = [
        _header(title, diagnosis, spec),
        _error(diagnosis.error),
        _findings(diagnosis.findings),
        _output(diagnosis.output),
        _inventory(diagnosis.totals),
        _bench(bench) if bench is not None else "",
        _spec(spec),
        _environment(diagnosis.environment, diagnosis.timings),
    ]
    body = "\n".join(part for part in parts if part)
    return (f'<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8" />\n'
            f'<meta name="viewport" content="width=device-width, initial-scale=1" />\n'
            f"<title>{_e(title)}</title>\n<style>{_CSS}</style>\n</head>\n<body>\n{body}\n"
            f"</body>\n</html>\n")


# -- sections ------------------------------------------------------------------------------------
def _header(title: str, d: Diagnosis, spec: PipelineSpec | None) -> str:
    errors = len(d.errors)
    if d.ok:
        status = _badge("ok", OK_COLOUR)
    else:
        status = _badge(f"{errors} error{'s' if errors != 1 else ''}" if errors else "failed",
                        SEVERITY_COLORS["error"])
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    count = len(d.findings)
    return (f"<header>\n<h1>{_e(title)} {status}</h1>\n"
            f'<p class="meta">Dataset <code>{_e(spec.dataset if spec is not None else "?")}</code> on '
            f'<code>{_e(d.device or "?")}</code>. {count} finding'
            f'{"s" if count != 1 else ""}. Made by fp16studio {_e(__version__)} on {now}.'
            f"</p>\n</header>")


def _error(error: RunError | None) -> str:
    if not error:
        return ""
    rows = [(key, value) for key, value in (("type", error.type), ("stage", error.stage),
                                            ("module", error.module)) if value]
    return (f'<section id="error">\n<h2>The pipeline failed</h2>\n{_key_table(rows)}\n'
            f"<pre>{_e(error.message)}</pre>\n</section>")


def _findings(findings: list[Finding]) -> str:
    if not findings:
        return '<section id="findings">\n<h2>Findings</h2>\n<p>No findings.</p>\n</section>'
    return ('<section id="findings">\n<h2>Findings</h2>\n'
            + "\n".join(_finding(f) for f in by_severity(findings)) + "\n</section>")


def _finding(f: Finding) -> str:
    colour = SEVERITY_COLORS.get(f.severity, "#999")
    fix_list = ""
    if f.fixes:
        # the code to write where the fix has some (a spec's fix may have none)
        items = "".join(f"<li>{_e(fix.title)} <code>{_e(fix.id)}</code>"
                        f"{_code(fix.code_text() if fix.code is not None else None)}</li>"
                        for fix in f.fixes)
        fix_list = f"<p>Fixes, best first:</p>\n<ol>{items}</ol>\n"
    evidence_table = _key_table([(key.replace("_", " "), evidence_value(value))
                                 for key, value in f.evidence.items() if key != "series"])
    series = f.evidence.get("series")
    chart = _series_chart(series, f.evidence.get("dtype", "half")) if series else ""
    return (f'<div class="finding" style="border-color: {colour}">\n'
            f"<h3>{_badge(f.severity, colour)} <code>{_e(f.code)}</code> at "
            f"<code>{_e(f.location)}</code></h3>\n"
            f"<p>{_e(f.message)}</p>\n{chart}{evidence_table}\n{fix_list}</div>")


def _series_chart(series: list, dtype: str) -> str:
    """The line's value against its float32 shadow over its calls (a one-number value: a
    running total, a state), else the share of each call's elements on a boundary."""
    width, height, pad = 520, 160, 36
    twin = all(len(point) == 3 for point in series)
    lines = [(dtype, [(p[0], p[1]) for p in series], BAR_COLOUR, "")]
    if twin:
        lines.append(("float32", [(p[0], p[2]) for p in series], "#D55E00", ' stroke-dasharray="5 3"'))
    xs = [x for _, points, _, _ in lines for x, _ in points]
    ys = [y for _, points, _, _ in lines for _, y in points if y == y and abs(y) != float("inf")]
    if not ys:
        return ""
    x0, x1 = min(xs), max(xs) or 1
    y0, y1 = min(min(ys), 0.0), max(ys) or 1.0
    span_x, span_y = (x1 - x0) or 1, (y1 - y0) or 1

    def at(x, y):
        return (pad + (width - 2 * pad) * (x - x0) / span_x,
                height - pad + 10 - (height - 2 * pad) * (y - y0) / span_y)

    parts = []
    for name, points, colour, dash in lines:
        coords = " ".join("%.1f,%.1f" % at(x, y) for x, y in points
                          if y == y and abs(y) != float("inf"))
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5"{dash} '
                     f'points="{coords}"><title>{_e(name)}</title></polyline>')
    title = (f"The value in {dtype} and its float32 shadow over the line's calls" if twin else
             "Share of each call's elements on a boundary (inf, 0, 1.0, absorbed)")
    legend = f"{dtype} (solid)" + (", float32 (dashed)" if twin else "")
    parts.append(f'<text x="{pad}" y="14">{_e(legend)}: {_e(f"{y1:.4g}")} at most</text>')
    parts.append(f'<text x="{pad}" y="{height - 4}">call {x0} … {x1}</text>')
    return (f'<figure>\n<figcaption>{_e(title)}</figcaption>\n'
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="{_e(title)}">'
            f"<title>{_e(title)}</title>{''.join(parts)}</svg>\n</figure>\n")


def _code(text: str | None) -> str:
    """The code to write, as the command line and the window show it (dedented: the user's
    indentation belongs to their script, not to the page)."""
    return f'<pre>{_e(textwrap.dedent(text))}</pre>' if text else ""


def _output(output: ModelOutput | None) -> str:
    if output is None:
        return ""
    rows = [("name", output.name), ("dtype", output.dtype), ("shape", evidence_value(output.shape)),
            ("finite", evidence_value(output.finite))]
    return f'<section id="output">\n<h2>Model output</h2>\n{_key_table(rows)}\n</section>'


def _inventory(inventory: Inventory) -> str:
    if not inventory.tensors:   # no tree was walked (a failed load, a document without one)
        return ""
    totals = _key_table([
        ("parameters", f"{inventory.parameters:,}"),
        ("tensors", f"{inventory.tensors:,}"),
        ("memory", _bytes(inventory.bytes)),
    ])
    parts = [f'<section id="inventory">\n<h2>Tensor inventory</h2>\n{totals}']
    for counts, label in ((inventory.dtypes, "Tensors by dtype"), (inventory.devices, "Tensors by device")):
        if counts:
            rows = sorted(counts.items(), key=lambda kv: -kv[1])
            parts.append(_bar_chart(label, [(str(k), v) for k, v in rows], lambda v: f"{v:,}"))
    return "\n".join(parts) + "\n</section>"


_BENCH_CHARTS = (
    ("Throughput, samples/s (higher is better)", lambda v: v.samples_per_s,
     lambda x: f"{x:,.1f}"),
    ("Latency p50, ms (lower is better)", lambda v: v.latency_ms.p50 if v.latency_ms else None,
     lambda x: f"{x:,.2f}"),
    ("Peak memory (lower is better)", lambda v: v.peak_memory_bytes, lambda x: _bytes(x)),
    ("Weights (lower is better)", lambda v: v.weights_bytes, lambda x: _bytes(x)),
)

# The table's columns, of the shared ones and the verdict's: what fits the page's width; the
# other figures are said under the table, with each variant's verdict.
_BENCH_TABLE = ("Variant", "Status", "Samples/s", "vs float32", "p50 ms", "Busy ms", "Bound",
                "Spread", "Peak memory", "Weights", "Max |diff| vs fp32", "Top-1 agreement")
# Each step split into the GPU's busy time and the rest (the interpreter, launches, waits).
BUSY_COLOURS = (OKABE_ITO["blue"], OKABE_ITO["grey"])


def _bench(bench: BenchResult) -> str:
    ran = [v for v in bench.variants if v.ok]
    parts = [f'<section id="bench">\n<h2>Benchmark</h2>\n{_key_table(_bench_facts(bench))}']
    if bench.verdict:
        parts.append(f"<p><strong>Verdict:</strong> {_e(bench.verdict)}</p>")
    parts.extend(_finding(f) for f in by_severity(bench.findings))
    for title, value_of, fmt in _BENCH_CHARTS:
        rows = [(v.name, value_of(v)) for v in ran]
        rows = [(name, value) for name, value in rows if isinstance(value, (int, float))]
        if rows:
            parts.append(_bar_chart(title, rows, fmt))
    split = [(v.name, (v.busy_ms, max(v.overhead_ms or 0.0, 0.0)))
             for v in ran if v.busy_ms is not None]
    if split:
        parts.append(_bar_chart("Time per call, ms: GPU busy (dark) + the rest of the step "
                                "(light)", split, lambda x: f"{x:,.2f}", BUSY_COLOURS))
    columns = sorted((c for c in bench_columns(bench) if c[0] in _BENCH_TABLE),
                     key=lambda c: _BENCH_TABLE.index(c[0]))
    head = "".join(f'<th class="{"num" if i > 1 else ""}">{_e(name)}</th>'
                   for i, (name, *_) in enumerate(columns))
    body = []
    for v in bench.variants:
        cells = "".join(f'<td class="{"num" if i > 1 else ""}">{_e(text(raw(v)) or "—")}</td>'
                        for i, (_, raw, text, _) in enumerate(columns))
        body.append(f"<tr>{cells}</tr>")
        if not v.ok and v.error:   # the error gets a row of its own under a failed variant
            body.append(f'<tr><td></td><td colspan="{len(columns) - 1}">'
                        f"{_e(v.error)}</td></tr>")
    # As wide as its columns: it scrolls inside the page rather than widening it.
    parts.append(f'<div class="wide"><table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n'
                 + "\n".join(body) + "\n</tbody>\n</table></div>")
    said = [f"<li><strong>{_e(v.name)}</strong>{' (unstable)' if stability(v) == 'noisy' else ''}: "
            + _e(" ".join(filter(None, (v.verdict, bench_details(bench, v)))))
            + "</li>" for v in ran]
    if said:
        parts.append('<ul class="verdicts">\n' + "\n".join(said) + "\n</ul>")
    parts.extend(f'<p class="meta">{_e(note)}.</p>' for note in bench_notes(bench))
    return "\n".join(parts) + "\n</section>"


def _bench_facts(bench: BenchResult) -> list[tuple[str, str]]:
    """What the benchmark ran on, in words: device, batch, TF32 baseline, notes."""
    facts = []
    if bench.device:
        name = bench.device_name
        facts.append(("Device", f"{bench.device} ({name})" if name else bench.device))
    batch = bench.batch
    if batch is not None and batch.size:
        facts.append(("Batch", f"{batch.size} samples"
                      + (f", {batch.tokens} tokens" if batch.tokens else "")))
    tf32 = bench.tf32
    if tf32 is not None and bench.device.startswith("cuda"):
        on = {True: "on", False: "off"}
        facts.append(("float32 baseline", f"TF32 matmul {on[tf32.cuda_matmul_allow_tf32]}, "
                      f"cuDNN TF32 {on[tf32.cudnn_allow_tf32]}"))
    for title, said in (("No float32 reference", bench.reference_error), ("Note", bench.note)):
        if said:
            facts.append((title, said))
    return facts


def _spec(spec: PipelineSpec | None) -> str:
    if spec is None:
        return ""
    rows = [(k, evidence_value(v)) for k, v in spec.to_dict().items() if k != "applied_fixes"]
    applied = ""
    if spec.applied_fixes:   # the spec's own record of them: {"id", "title", "code"}
        items = "".join(f"<li>{_e(fix.get('title', ''))} <code>{_e(fix.get('id', ''))}</code>"
                        f"{_code(fix.get('code'))}</li>" for fix in spec.applied_fixes)
        applied = f"<p>Fixes applied, oldest first:</p>\n<ol>{items}</ol>\n"
    return f'<section id="spec">\n<h2>Pipeline spec</h2>\n{applied}{_key_table(rows)}\n</section>'


def _environment(environment: Environment | None, timings: dict | None) -> str:
    said = environment.to_json() if environment is not None else {}
    rows = [(k, evidence_value(v)) for k, v in said.items() if v is not None]
    rows += [(f"{stage} time", f"{seconds:.2f} s") for stage, seconds in (timings or {}).items()
             if isinstance(seconds, (int, float))]
    if not rows:
        return ""
    return f'<section id="environment">\n<h2>Environment</h2>\n{_key_table(rows)}\n</section>'


# -- building blocks -----------------------------------------------------------------------------
def _bar_chart(title: str, rows: list[tuple[str, object]], fmt, colours=(BAR_COLOUR,)) -> str:
    """Horizontal bars, one per row, each labelled with its value (readable without colour).
    A row's value may be a tuple: its parts stacked, in `colours`, labelled with their sum."""
    label_w, bar_w, value_w, row_h = 170, 380, 110, 24
    rows = [(label, value if isinstance(value, tuple) else (value,)) for label, value in rows]
    top = max((sum(parts) for _, parts in rows), default=0) or 1
    height = row_h * len(rows) + 8
    bars = []
    for i, (label, parts) in enumerate(rows):
        y, x = 4 + i * row_h, float(label_w)
        bars.append(f'<text x="{label_w - 8}" y="{y + 16}" text-anchor="end">{_e(label)}</text>')
        for part, colour in zip(parts, colours):
            width = max(1.0, bar_w * part / top) if part > 0 else 0.0
            bars.append(f'<rect x="{x:.1f}" y="{y + 3}" width="{width:.1f}" '
                        f'height="{row_h - 6}" fill="{colour}" />')
            x += width
        bars.append(f'<text x="{x + 6:.1f}" y="{y + 16}">{_e(fmt(sum(parts)))}</text>')
    total_w = label_w + bar_w + value_w
    return (f'<figure>\n<figcaption>{_e(title)}</figcaption>\n'
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{height}" '
            f'viewBox="0 0 {total_w} {height}" role="img" aria-label="{_e(title)}">'
            f"<title>{_e(title)}</title>{''.join(bars)}</svg>\n</figure>")


def _key_table(rows: list[tuple[str, object]]) -> str:
    if not rows:
        return ""
    body = "".join(f"<tr><th>{_e(key)}</th><td>{_e(value)}</td></tr>" for key, value in rows)
    return f"<table>{body}</table>"


def _badge(text: str, colour: str) -> str:
    return f'<span class="badge" style="background: {colour}">{_e(text)}</span>'


def _bytes(count) -> str:
    return size(count, missing="—")


def _e(value) -> str:
    return escape("" if value is None else str(value), quote=True)
