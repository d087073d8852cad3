"""Code wrapped to a width between its tokens, never inside a name, a number or a string, so
what is printed still runs where it is pasted (the window's fix code, the command line's).

A line breaks where Python lets it: inside brackets after a comma or an opening bracket, or
before an operator (the continuation indented one level); outside brackets before an operator
or after an assignment's `=`, with a backslash. A comment too long for its line goes on lines
of its own above it, wrapped between words. A token longer than the width (a long string) stays whole and its line long:
cut, it would no longer be the same code. Code that does not tokenize is returned as it is,
unless it is a fragment (a few lines of a file, shown, not run: wrap_lines): then its lines
break where the tokens read before the first error allow.
"""

from __future__ import annotations

import io
import textwrap
import tokenize

CONTINUATION = "    "   # the indent of a continuation line, past its statement's own
OPENING, CLOSING = "([{", ")]}"
# Operators a line may break before (a continuation line then starts with it, as PEP 8 has it).
BREAK_BEFORE = {"+", "-", "*", "/", "//", "%", "@", "|", "&", "and", "or", "if", "else", "for",
                "in", "==", "!=", "<", ">", "<=", ">="}
# Python 3.12 and later tokenize an f-string (3.14 a t-string) as parts: no break inside one.
ASSIGN = {"=", "+=", "-=", "*=", "/=", "//=", "%=", "@=", "|=", "&=", "^=", ">>=", "<<=", "**=", ":="}
_STRING_STARTS = {getattr(tokenize, name) for name in ("FSTRING_START", "TSTRING_START") if hasattr(tokenize, name)}
_STRING_ENDS = {getattr(tokenize, name) for name in ("FSTRING_END", "TSTRING_END") if hasattr(tokenize, name)}
_OPERANDS = {tokenize.NAME, tokenize.NUMBER, tokenize.STRING, *_STRING_ENDS}


def wrap_code(code: str, width: int) -> str:
    """`code` with each line longer than `width` broken between tokens (module docstring)."""
    wrapped = "\n".join(piece for pieces in wrap_lines(code, width) for piece in pieces)
    return wrapped + "\n" if code.endswith("\n") else wrapped


def wrap_lines(code: str, width: int, fragment: bool = False) -> list[list[str]]:
    """Each line of `code` as the lines it wraps to within `width` (module docstring), so a
    caller can number or mark them; `fragment`: code cut out of a file, which may start or
    end inside a statement or a string."""
    lines = code.splitlines()
    if width <= 0 or all(len(line) <= width for line in lines):
        return [[line] for line in lines]
    body = textwrap.dedent(code)
    margin = _common_indent(code, body)
    breaks: dict[int, list] = {}
    try:
        _breaks(body, breaks)
    except (tokenize.TokenError, SyntaxError):   # IndentationError is one
        if not fragment:
            return [[line] for line in lines]
    return [[margin + piece if piece.strip() else piece
             for piece in _wrap_line(line, breaks.get(number, ()), width - len(margin))]
            for number, line in enumerate(body.splitlines(), 1)]


def _common_indent(code: str, body: str) -> str:
    for line, dedented in zip(code.splitlines(), body.splitlines()):
        if dedented.strip():
            return line[:len(line) - len(dedented)]
    return ""


def _breaks(body: str, breaks: dict[int, list[tuple[int, bool, bool]]]):
    """Fills `breaks`, line number -> the places it may break: (column, inside brackets?, a
    comment starts there?), in order, as far as `body` tokenizes."""
    depth = strings = 0
    previous = None
    for token in tokenize.generate_tokens(io.StringIO(body).readline):
        kind, text, (row, column), (end_row, end_column) = token[:4]
        strings += (kind in _STRING_STARTS) - (kind in _STRING_ENDS)
        if strings or kind in _STRING_ENDS:
            previous = token
            continue
        if kind == tokenize.COMMENT:
            breaks.setdefault(row, []).append((column, depth > 0, True))
        elif text in BREAK_BEFORE and kind in (tokenize.OP, tokenize.NAME) and _after_operand(previous, row):
            breaks.setdefault(row, []).append((column, depth > 0, False))   # a binary operator
        elif kind == tokenize.OP and text in OPENING:
            depth += 1
            breaks.setdefault(end_row, []).append((end_column, True, False))
        elif kind == tokenize.OP and text in CLOSING:
            depth = max(0, depth - 1)
        elif kind == tokenize.OP and text in ASSIGN and not depth:   # after `name =`
            breaks.setdefault(end_row, []).append((end_column, False, False))
        elif kind == tokenize.OP and text == "," and depth:
            breaks.setdefault(end_row, []).append((end_column, True, False))
        previous = token


def _after_operand(previous, row: int) -> bool:
    """An operator after `previous` on the same line is a binary one (`a - b`, not `-b`)."""
    return previous is not None and previous.start[0] == row and (
        previous.type in _OPERANDS and previous.string not in BREAK_BEFORE
        or previous.type == tokenize.OP and previous.string in CLOSING)


def _wrap_line(line: str, breaks, width: int) -> list[str]:
    if len(line) <= width:
        return [line]
    indent = line[:len(line) - len(line.lstrip())]
    comment = next((column for column, _, is_comment in breaks if is_comment), None)
    if comment is not None:   # the comment on lines of its own, above the code
        words = line[comment:].lstrip("#").strip()
        above = textwrap.wrap(words, max(20, width - len(indent) - 2), break_long_words=False,
                              break_on_hyphens=False, initial_indent=indent + "# ",
                              subsequent_indent=indent + "# ")
        code = line[:comment].rstrip()
        return above + (_wrap_line(code, [b for b in breaks if b[0] < comment], width) if code.strip() else [])
    out, start, lead = [], 0, ""
    places = [(column, inside) for column, inside, _ in breaks if len(indent) < column < len(line)]
    while len(lead) + len(line) - start > width:
        fits = [(column, inside) for column, inside in places
                if start < column and len(lead) + column - start + (0 if inside else 2) <= width]
        if not fits:   # nothing fits: the first place past the width, or the rest as it is
            fits = [next(((column, inside) for column, inside in places if start < column), (None, True))]
            if fits[0][0] is None:
                break
        column, inside = fits[-1]
        piece = line[start:column].rstrip() if not out else lead + line[start:column].strip()
        out.append(piece + ("" if inside else " \\"))
        start, lead = column, indent + CONTINUATION
        while start < len(line) and line[start] == " ":
            start += 1
    out.append(lead + line[start:].strip() if out else line)
    return out
