"""Fix code wrapped to a width between tokens (issue 43): what is printed is the same program
(the same tokens, names and strings whole), compiles where the original did, and keeps to the
width wherever a token allows; the command line prints its fixes within 120 columns."""

import io
import textwrap
import tokenize

import pytest

from fp16studio.core.diagnostics.findings import CodeEdit, Finding, Fix
from fp16studio.core.present.code_wrap import wrap_code, wrap_lines
from fp16studio.core.present.terminal import finding_lines

SAMPLES = [
    "        input_tensor = input_tensor.to(torch.float16)  # cast the floating inputs to the "
    "model's dtype before the forward pass",
    "model = AutoModelForImageClassification.from_pretrained('models/tiny-resnet', "
    "dtype=torch.float32, device_map='auto', revision=\"main\")",
    "loss = criterion(outputs.logits.float(), labels) + regularisation_weight * penalty_term "
    "- another_long_name",
    "x = f'{some_long_variable_name} and {another_name}' + yet_another_long_name "
    "if some_condition_holds else fallback_value_name",
    "from fp16studio.core.run.islands import run_in_float32\n"
    "for name, module in model.named_modules():\n"
    "    if any(fnmatch(name, pattern) for pattern in ['*.layer_norm', '*.wo', '*.norm*']):\n"
    "        module.register_forward_pre_hook(lambda m, args: tuple(a.float() for a in args))\n",
    "# bert.encoder.layer.0.attention.output.dense and bert.encoder.layer.0.output.dense run in "
    "float32, the rest in float16\nrun_in_float32(model, ['bert.encoder.layer.0.attention.output."
    "dense', 'bert.encoder.layer.0.output.dense'])",
]


def program(code: str) -> list:
    """The tokens that make the program (layout and comments aside)."""
    skip = {tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.COMMENT,
            tokenize.ENDMARKER}
    tokens = tokenize.generate_tokens(io.StringIO(textwrap.dedent(code)).readline)
    return [(t.type, t.string) for t in tokens if t.type not in skip]


def comment_words(code: str) -> list:
    tokens = tokenize.generate_tokens(io.StringIO(textwrap.dedent(code)).readline)
    return [w for t in tokens if t.type == tokenize.COMMENT for w in t.string.lstrip("#").split()]


@pytest.mark.parametrize("code", SAMPLES)
@pytest.mark.parametrize("width", [24, 36, 50, 64, 80, 107])
def test_the_same_program_within_the_width(code, width):
    wrapped = wrap_code(code, width)
    assert program(wrapped) == program(code)
    assert comment_words(wrapped) == comment_words(code)
    compile(textwrap.dedent(wrapped), "fix", "exec")


@pytest.mark.parametrize("code", SAMPLES)
@pytest.mark.parametrize("width", [56, 64, 80, 107])
def test_every_line_keeps_to_a_width_its_tokens_allow(code, width):
    assert all(len(line) <= width for line in wrap_code(code, width).splitlines())


def test_a_token_longer_than_the_width_stays_whole():
    code = "x = call('" + "a" * 60 + "', other)"
    wrapped = wrap_code(code, 30)
    assert "'" + "a" * 60 + "'" in wrapped and program(wrapped) == program(code)


def test_code_that_does_not_tokenize_is_left_as_it_is():
    assert wrap_code("def f(:\n    x = ('unclosed", 10) == "def f(:\n    x = ('unclosed"


def test_the_command_line_prints_fix_code_within_120_columns():
    fix = Fix("float32-islands", "Run in float32", {}, code=CodeEdit(SAMPLES[-1] * 2))
    finding = Finding("overflow", "error", "model", "inf", {}, (fix,))
    lines = finding_lines(finding)
    assert all(len(line) <= 120 for line in lines), max(lines, key=len)
    code = "\n".join(lines[lines.index(next(x for x in lines if "[float32-islands]" in x)) + 1:])
    assert program(code) == program(SAMPLES[-1] * 2)


def test_a_fragment_of_a_file_wraps_as_far_as_it_tokenizes_each_line_apart():
    """An excerpt (shown, not run) may end inside a call: its lines still break between tokens,
    each line's pieces apart so the caller can number them; whole code that does not tokenize
    is still left as it is."""
    fragment = ("    value = compute_the_projection(hidden_states_of_the_block, attention_mask)\n"
                "    scores = torch.softmax(value * scaling_factor_of_model, dim=-1,")
    lines = wrap_lines(fragment, 36, fragment=True)
    assert len(lines) == 2 and all(len(pieces) > 1 for pieces in lines)
    assert all(len(piece) <= 36 for pieces in lines for piece in pieces)
    assert program("\n".join(p for pieces in lines for p in pieces) + ")") == program(fragment + ")")
    assert wrap_lines(fragment, 36) == [[line] for line in fragment.splitlines()]
