"""The detail panel says a finding's evidence in words (issue 43), as core's evidence_words has
them: not `provenance: dtype: float16, from: dtype-argument, source: –`, not raw kind names."""

from fp16studio.core import Finding
from fp16studio.gui.findings_panel import FindingsPanel


def test_the_detail_says_provenance_and_kind_as_sentences(qtbot):
    panel = FindingsPanel()
    qtbot.addWidget(panel)
    provenance = {"dtype": "float16", "from": "dtype-argument", "source": {"file": "/w/run.py", "line": 13},
                  "training": False}
    finding = Finding("precision-loss", "warning", "total:20", "Additions were lost.",
                      {"kind": "absorbed", "provenance": provenance, "model_cast": None})
    panel.set_findings([finding], ok=False)
    text = panel.detail.evidence.text().replace("\u200b", "")
    assert "float16, because it was loaded with dtype=torch.float16 at line 13" in text
    assert "additions to a total left it unchanged" in text
    assert "dtype-argument" not in text and "from:" not in text and ">absorbed<" not in text
    assert "model cast to" in text and "model_cast" not in text


def test_the_evidence_is_a_line_per_row_whose_value_wraps_at_the_panels_width(qtbot):
    """Each row is its name, then its value, on a line of its own that wraps at the panel's
    width (no table: its value column took a module path over three lines, and a label lays a
    table out several times for each new text)."""
    panel = FindingsPanel()
    qtbot.addWidget(panel)
    location = "bert.encoder.layer.11.attention.output.LayerNorm"
    finding = Finding("overflow", "error", location, "inf appeared.", {"abs_max": 70000.0, "finite": False})
    panel.set_findings([finding], ok=False)
    text = panel.detail.evidence.text()
    lines = text.split("<br>")
    assert "<table" not in text and len(lines) == 3
    assert lines[0].startswith("<span") and location in lines[0].replace("\u200b", "")
