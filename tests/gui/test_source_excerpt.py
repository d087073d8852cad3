"""The script's lines beside a traced finding (issue 43): in a narrow detail panel they wrap
between tokens, as fix code does, never inside a name or a dotted path (Qt's own wrapping breaks
such a line anywhere), continuations indented past the line numbers; an excerpt that starts or
ends inside a statement wraps all the same."""

import io
import tokenize

import pytest
from PySide6.QtWidgets import QApplication

from fp16studio.core.diagnostics.findings import Finding
from fp16studio.gui.code_text import GUTTER
from fp16studio.gui.findings_panel import FindingDetail

SCRIPT = """def forward(self, hidden_states_of_the_block, attention_mask):
    projected = self.encoder.layer_stack.attention_output_projection(hidden_states_of_the_block,
        attention_mask)
    scores = torch.nn.functional.softmax(projected.to(torch.float16) * self.scaling_factor + bias,
        dim=-1)
    return scores
"""


def tokens(code: str) -> list:
    skip = {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}
    found = []
    try:
        for t in tokenize.generate_tokens(io.StringIO(code).readline):
            if t.type not in skip:
                found.append(t.string)
    except tokenize.TokenError:
        pass
    return found


def shown(qtbot, tmp_path, width, line):
    script = tmp_path / "model_code.py"
    script.write_text(SCRIPT)
    detail = FindingDetail()
    qtbot.addWidget(detail)
    detail.resize(width, 900)
    detail.show()
    detail.show_finding(Finding("overflow", "error", "model", "overflows", {},
                                source={"file": str(script), "line": line}))
    QApplication.processEvents()
    block, rows, broken = detail.source.document().firstBlock().next(), [], []   # past the file
    while block.isValid():
        rows += block.text().split("\u2028")
        if block.layout().lineCount() > len(block.text().split("\u2028")):
            broken.append(block.text())
        block = block.next()
    return detail.source, rows, broken


@pytest.mark.parametrize("line", [2, 5])   # lines 1-4 end inside a call, 3-6 start in one
@pytest.mark.parametrize("width", [260, 330])
def test_the_scripts_lines_wrap_between_tokens_past_their_numbers(qtbot, tmp_path, width, line):
    source, rows, broken = shown(qtbot, tmp_path, width, line)
    # Wrapped by us between tokens; Qt broke only a run of tokens longer than a line holds.
    numbered = [row for row in rows if row[:GUTTER].strip()]
    assert len(rows) > len(numbered)
    assert all(len(text) > source.columns(source.width()) for text in broken)
    first = int(numbered[0].split()[0])
    excerpt = SCRIPT.splitlines()[first - 1:first - 1 + len(numbered)]
    code = "\n".join(row[GUTTER:] for row in rows)
    assert tokens(code) == tokens("\n".join(excerpt))
    assert all(not row[:GUTTER].strip() or row[:GUTTER].strip().isdigit() for row in rows)
    # The whole lines are what is copied.
    assert all(text.strip().replace(">", "&gt;") in source.text() for text in excerpt)
