"""A fix's code as a test reads it: whether it parses as Python."""

import ast
import textwrap


def parses(code: str) -> bool:
    """The code parses; a line that opens a block (the user's `with` line rewritten, its body
    unchanged) with a body under it."""
    text = textwrap.dedent(code)
    if text.rstrip().split("#")[0].rstrip().endswith(":"):
        text += "\n    pass"
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True
