"""A fix's code in the Findings panel (issue 43): wrapped between tokens to the panel's width,
never inside a name or a string (Qt would break it anywhere), again when the panel is resized.
Only a run of tokens with no place to break between them, longer than the panel holds, is
left to Qt to break."""

import io
import tokenize

import pytest
from PySide6.QtWidgets import QApplication

from fp16studio.gui.findings_panel import FixCode

CODE = ("        model = AutoModelForImageClassification.from_pretrained('models/tiny-resnet', "
        "dtype=torch.float32, device_map='auto')  # load the weights in float32, compute in float16")


def program(code: str) -> list:
    skip = {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT,
            tokenize.ENDMARKER}
    tokens = tokenize.generate_tokens(io.StringIO(code.strip() + "\n").readline)
    return [(t.type, t.string) for t in tokens if t.type not in skip]


def laid_out(qtbot, width):
    """The fix's code lines as shown `width` wide, and those Qt broke further."""
    fix = FixCode("Load the model in float32", CODE)
    qtbot.addWidget(fix)
    fix.resize(width, fix.heightForWidth(width))
    fix.show()
    QApplication.processEvents()
    assert fix.heightForWidth(width) >= fix.document().size().height()
    block, lines, broken = fix.document().firstBlock().next(), [], []   # past the title
    while block.isValid():
        lines += block.text().split("\u2028")
        if block.layout().lineCount() > 1:
            broken.append(block.text())
        block = block.next()
    return fix, "\n".join(lines), broken


@pytest.mark.parametrize("width", [260, 420, 640])
def test_the_code_breaks_between_tokens_qt_only_what_they_could_not(qtbot, width):
    fix, shown, broken = laid_out(qtbot, width)
    assert program(shown) == program(CODE) and len(shown.splitlines()) > 1
    # Qt broke only a run of tokens with no place to break, longer than a line holds.
    assert all(len(text) > fix.columns(width) for text in broken)
    assert width < 640 or not broken


@pytest.mark.parametrize("width", [230, 300, 420])
def test_a_line_the_panel_holds_is_not_wrapped_and_one_more_character_is(qtbot, width):
    """Wrapped at the columns the panel shows, not fewer: a line as long as a line of the
    panel holds stays whole (no backslash), one character more is wrapped by us, not by Qt."""
    probe = FixCode("t", "x")
    qtbot.addWidget(probe)
    probe.resize(width, 300)
    probe.show()
    QApplication.processEvents()
    held = 1
    while True:   # the characters a line of the panel shows before Qt breaks it
        probe.setHtml(f"<b>t</b><pre style='white-space:pre-wrap; margin:2px 0'>{'x' * (held + 1)}</pre>")
        if probe.document().lastBlock().layout().lineCount() > 1:
            break
        held += 1
    for extra, lines in ((0, 1), (1, 2)):
        code = "result = " + "y" * (held + extra - len("result = "))
        fix = FixCode("t", code)
        qtbot.addWidget(fix)
        fix.resize(width, 300)
        fix.show()
        QApplication.processEvents()
        block, shown, laid_out = fix.document().firstBlock().next(), [], 0   # past the title
        while block.isValid():
            shown += block.text().split("\u2028")
            laid_out += block.layout().lineCount()
            block = block.next()
        assert len(shown) == laid_out == lines, (held, shown)
