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
