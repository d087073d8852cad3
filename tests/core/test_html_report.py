import xml.etree.ElementTree as ET

import pytest

from fp16studio.core.diagnostics.report import Environment, RunError
from fp16studio.core.diagnostics.findings import CodeEdit, Finding, Fix
from fp16studio.core.diagnostics.report import Diagnosis, ModelOutput
from fp16studio.core.diagnostics.tree import Inventory
from fp16studio.core.precision.bench import BenchResult
from fp16studio.core.spec.value import PipelineSpec
from fp16studio.core.present.html import render_report

EVIL = '<script>alert("x")</script> & <img src=x onerror=1>'


def diagnosis(**overrides):
    cast = Fix("cast-inputs", f"Cast inputs {EVIL}", {},
               code=CodeEdit(f"    with torch.autocast(device_type=\"cpu\"):\n        y = f({EVIL!r})"))
    values = dict(
        ok=False,
        findings=[
            Finding("dtype-mismatch", "error", f"encoder.{EVIL}",
                    f"Input was float32, weights float16. {EVIL}",
                    {"input_dtype": "float32", EVIL: [1, 2]},
                    (cast, Fix("load-fp32", "Load in float32", {}))),
            Finding("half-on-cpu", "warning", "model", "Slow."),
        ],
        error=RunError(type="RuntimeError", message=EVIL, stage="forward", module="encoder"),
        inventory=Inventory(parameters=1234567, tensors=40, bytes=5 * 2**20,
                            dtypes={"float16": 30, "int64": 4, EVIL: 6}, devices={"cpu": 40}),
        output=ModelOutput(name="logits", dtype="float16", shape=[4, 3]),
        timings={"forward": 0.25},
        environment=Environment(torch="2.13.0"),
    )
    values.update(overrides)
    spec = PipelineSpec(model=f"models/{EVIL}", dataset="data", model_dtype="float16",
                        applied_fixes=({"id": "cast-inputs", "title": EVIL},))
    values.pop("ok")   # a diagnosis says it from its findings and error
    return Diagnosis(spec, "cpu", **values)


BENCH = {
    "device": "cpu",
    "variants": [
        {"name": "float32", "ok": True, "samples_per_s": 100.0,
         "latency_ms": {"p50": 40.0, "p90": 44.0, "min": 39.0}, "peak_memory_bytes": 2**20,
         "weights_bytes": 4 * 2**20, "max_abs_diff_vs_float32": 0.0, "top1_agreement": 1.0},
        {"name": "bfloat16", "ok": True, "samples_per_s": 150.0,
         "latency_ms": {"p50": 26.0, "p90": 30.0, "min": 25.0}, "peak_memory_bytes": 2**19,
         "weights_bytes": 2 * 2**20, "max_abs_diff_vs_float32": 0.01, "top1_agreement": 0.75},
        {"name": "float16", "ok": False, "error": EVIL, "samples_per_s": None,
         "latency_ms": None, "peak_memory_bytes": None, "weights_bytes": None,
         "max_abs_diff_vs_float32": None, "top1_agreement": None},
    ],
}


def parse(text):
    # The report is well-formed XML on purpose: a strict parse proves every tag is closed and
    # every piece of user text escaped (an unescaped "<" or "&" is a parse error).
    return ET.fromstring(text.split("\n", 1)[1])


def texts(root):
    return "".join(root.itertext())


def test_user_text_is_escaped_everywhere():
    html = render_report(diagnosis(), BenchResult.from_json(BENCH))
    assert "<script" not in html and "<img" not in html
    assert "&lt;script&gt;" in html
    root = parse(html)
    # Escaped, not dropped: the text reads back exactly as the user wrote it.
    assert f"models/{EVIL}" in texts(root.find("head/title"))
    assert EVIL in texts(root)


def test_self_contained():
    html = render_report(diagnosis(), BenchResult.from_json(BENCH))
    root = parse(html)
    assert not root.findall(".//script") and not root.findall(".//link")
    assert not [el for el in root.iter() if "src" in el.attrib or "href" in el.attrib]
    assert "url(" not in html and "@import" not in html


def test_findings_in_order_with_severity_in_words_and_fixes():
    # Listed least severe first, as a document from elsewhere may list them: shown errors first.
    shuffled = diagnosis().findings[::-1]
    shuffled.insert(1, Finding("half-on-cpu", "info", "x", "m"))
    root = parse(render_report(diagnosis(findings=shuffled)))
    findings = root.findall(".//div[@class='finding']")
    assert [texts(f.find("h3/span")) for f in findings] == ["error", "warning", "info"]
    fixes = [texts(li) for li in findings[0].findall("ol/li")]
    assert fixes[0].startswith("Cast inputs") and "load-fp32" in fixes[1]
    # the code to write, dedented as the command line prints it; a fix without code shows none
    code = findings[0].find("ol/li/pre")
    assert texts(code) == f'with torch.autocast(device_type="cpu"):\n    y = f({EVIL!r})'
    assert findings[0].findall("ol/li")[1].find("pre") is None
    assert "RuntimeError" in texts(root.find(".//section[@id='error']"))


def test_inventory_bars_by_dtype_and_device():
    root = parse(render_report(diagnosis()))
    charts = root.find(".//section[@id='inventory']").findall("figure")
    assert [texts(c.find("figcaption")) for c in charts] == ["Tensors by dtype", "Tensors by device"]
    by_dtype = charts[0].find("{http://www.w3.org/2000/svg}svg")
    widths = [float(r.get("width")) for r in by_dtype.iter("{http://www.w3.org/2000/svg}rect")]
    assert widths == sorted(widths, reverse=True) and len(widths) == 3
    assert widths[0] == pytest.approx(380) and widths[1] == pytest.approx(380 * 6 / 30)
    assert "1,234,567" in texts(root) and "5.0 MiB" in texts(root)


def test_bench_charts_and_table():
    root = parse(render_report(diagnosis(), BenchResult.from_json(BENCH)))
    section = root.find(".//section[@id='bench']")
    charts = section.findall("figure")
    assert len(charts) == 4
    throughput = [float(r.get("width")) for r in charts[0].iter("{http://www.w3.org/2000/svg}rect")]
    assert throughput == pytest.approx([380 * 100 / 150, 380], abs=0.1)  # failed variant: no bar
    rows = section.findall("div[@class='wide']/table/tbody/tr")  # scrolls, never widens the page
    cells = [[texts(td) for td in row.findall("td")] for row in rows]
    assert cells[1][:3] == ["bfloat16", "ok", "150.0"] and cells[1][-1] == "75.0%"
    assert cells[2][:2] == ["float16", "failed"] and cells[2][2] == "—"
    assert EVIL in cells[3][1]  # the failure reason, escaped


def test_the_bench_section_reads_as_words_not_json():
    bench = dict(BENCH, device_name="Some CPU", batch={"size": 4, "tokens": 128},
                 tf32={"cuda_matmul_allow_tf32": False}, note="Measured on a CPU.",
                 variants=[dict(v, memory_kind="cpu-live-tensors", spread=0.02) for v in BENCH["variants"]])
    section = parse(render_report(diagnosis(), BenchResult.from_json(bench))).find(".//section[@id='bench']")
    facts = {texts(row.find("th")): texts(row.find("td")) for row in section.findall("table/tr")}
    assert facts == {"Device": "cpu (Some CPU)", "Batch": "4 samples, 128 tokens", "Note": "Measured on a CPU."}
    words = texts(section)
    assert "Peak memory: the weights plus" in words and "Spread: how far apart" in words
    assert not any(mark in words for mark in ('{"', "['", '["', "cpu-live-tensors"))


def test_no_bench_section_without_bench():
    assert parse(render_report(diagnosis())).find(".//section[@id='bench']") is None


def test_clean_run_and_minimal_document():
    root = parse(render_report(Diagnosis(PipelineSpec(model="m", dataset="d"), "cpu")))
    assert texts(root.find(".//h1/span")) == "ok"
    assert "No findings." in texts(root)
    assert root.find(".//section[@id='error']") is None


def test_report_command_writes_the_report(demo_dir, tmp_path, capsys):
    from fp16studio.cli import main

    path = tmp_path / "report.html"
    assert main(["report", "demo:healthy", "-o", str(path), "--bench", "--variants", "float32"]) == 0
    root = parse(path.read_text())
    assert root.find(".//section[@id='findings']") is not None
    variants = root.findall(".//section[@id='bench']/div/table/tbody/tr")
    assert [texts(row.find("td")) for row in variants] == ["float32"]
    assert f"wrote {path}" in capsys.readouterr().out
    # A run with error findings still writes its report, and exits 1 like diagnose.
    assert main(["report", "demo:map-cast", "-o", str(path)]) == 1
    assert "dtype-mismatch" in texts(parse(path.read_text()))


def test_a_traced_scripts_report_names_the_spec_recovered_from_it_or_none():
    from fp16studio.core.script.trace import ScriptTrace

    seen = PipelineSpec(model="seen/model", dataset="d")
    root = parse(render_report(ScriptTrace(seen, "cpu", script="/work/train.py")))
    assert texts(root.find("head/title")) == "fp16studio report: pipeline"
    assert root.find(".//section[@id='spec']") is None   # the script was not described well
    recovered = ScriptTrace(seen, "cpu", script="/work/train.py", recovered=True)
    assert texts(parse(render_report(recovered)).find("head/title")) == "fp16studio report: seen/model"

