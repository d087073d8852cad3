"""The HTML report's benchmark: the verdict, busy time against the rest of each step, and a
table narrow enough for the page (the other figures under it, with each variant's verdict)."""

import xml.etree.ElementTree as ET

from fp16studio.core.diagnostics.report import Diagnosis
from fp16studio.core.precision.bench import BenchResult
from fp16studio.core.spec.value import PipelineSpec
from fp16studio.core.present.html import render_report

SVG = "{http://www.w3.org/2000/svg}"
EVERY_FIGURE = {"ok": True, "stable": True, "spread": 0.01, "tokens_per_s": 1e6,
                "first_call_ms": 900.0, "peak_memory_bytes": 2**30, "weights_bytes": 2**29,
                "max_abs_diff_vs_float32": 0.01, "top1_agreement": 0.99, "tflops": 100.0,
                "peak_fraction": 0.1, "cosine_vs_float32": 0.9999, "nonfinite_outputs": 0,
                "support": "native", "memory_kind": "cuda-max-allocated"}
BENCH = {"device": "cuda:0", "device_name": "NVIDIA H100 80GB HBM3",
         "verdict": "float16 pays: 4.17x float32's throughput but launch-bound.",
         "variants": [
             dict(EVERY_FIGURE, name="float32", samples_per_s=880.0, busy_ms=36.0,
                  overhead_ms=0.3, bound="math", kernel_speedup=1.0, verdict="float32 v.",
                  latency_ms={"p50": 36.3, "p90": 37.0, "min": 36.0}),
             dict(EVERY_FIGURE, name="float16", samples_per_s=3674.0, busy_ms=2.9,
                  overhead_ms=5.8, bound="launch", kernel_speedup=12.4, stable=False,
                  verdict="float16 is launch-bound.",
                  latency_ms={"p50": 8.7, "p90": 9.0, "min": 8.6})]}
DIAGNOSIS = Diagnosis(PipelineSpec(model="m", dataset="d"), "cuda:0")


def bench_section():
    text = render_report(DIAGNOSIS, BenchResult.from_json(BENCH))
    return ET.fromstring(text.split("\n", 1)[1]).find(".//section[@id='bench']")


def words(node):
    return "".join(node.itertext())


def test_the_verdict_and_each_variants_reason_are_said():
    section = bench_section()
    assert "Verdict: float16 pays: 4.17x" in words(section)
    items = [words(li) for li in section.findall("ul[@class='verdicts']/li")]
    assert items[0].startswith("float32: float32 v.")
    assert items[1].startswith("float16 (unstable): float16 is launch-bound.")
    assert "overhead 5.80 ms" in items[1] and "kernels 12.40× float32's" in items[1]
    assert "p90 9.00 ms" in items[1] and "cosine vs fp32 0.999900" in items[1]


def test_busy_time_and_the_rest_of_the_step_are_stacked_bars():
    section = bench_section()
    chart = next(f for f in section.findall("figure") if "GPU busy" in words(f.find("figcaption")))
    widths = [float(r.get("width")) for r in chart.iter(SVG + "rect")]
    # float32: 36.0 busy + 0.3 rest fills the width (380); float16: 2.9 + 5.8.
    assert len(widths) == 4 and sum(widths[:2]) == 380.0
    assert abs(widths[2] - 380 * 2.9 / 36.3) < 0.1 and abs(widths[3] - 380 * 5.8 / 36.3) < 0.1
    assert "8.70" in words(chart)


def test_the_table_keeps_to_the_columns_that_fit_the_page():
    header = [words(th) for th in bench_section().findall("div[@class='wide']/table/thead/tr/th")]
    assert header == ["Variant", "Status", "Samples/s", "vs float32", "p50 ms", "Busy ms", "Bound",
                      "Spread", "Peak memory", "Weights", "Max |diff| vs fp32", "Top-1 agreement"]
