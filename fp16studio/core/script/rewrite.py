"""Rewriting one line of the user's through its syntax tree (never by text search), so strings,
comments, conditionals and the operands' order survive: what the quiet-value fixes are made of.
"""

from __future__ import annotations

import ast


def segment(line: str, node) -> tuple[int, int]:
    """The node's characters on the line (ast counts bytes)."""
    data = line.encode()
    return (len(data[:node.col_offset].decode(errors="ignore")),
            len(data[:node.end_col_offset].decode(errors="ignore")))


def _statement(line: str):
    try:
        tree = ast.parse(line)
    except SyntaxError:
        return None
    return tree.body[0] if len(tree.body) == 1 else None


def _atom(text: str, node) -> str:
    """The expression as an operand: in parentheses unless it is one already."""
    simple = isinstance(node, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant))
    return text if simple else f"({text})"


def augmented(line: str) -> str | None:
    """`total += x` as `total = total.float() + x`: the running total kept in float32, its
    right-hand side whole (`debt -= p - q` is `debt = debt.float() - (p - q)`)."""
    node = _statement(line)
    if not isinstance(node, ast.AugAssign) or not isinstance(node.op, (ast.Add, ast.Sub)):
        return None
    target, value = ast.get_source_segment(line, node.target), \
        ast.get_source_segment(line, node.value)
    sign = "+" if isinstance(node.op, ast.Add) else "-"
    return f"{target} = {target}.float() {sign} {_atom(value, node.value)}"


def assigned_in_place(line: str) -> str | None:
    """`total.add_(x)` as `total = total.float().add(x)`: an in-place update on a float32
    copy, its result assigned (an in-place call on a temporary would change nothing)."""
    node = _statement(line)
    call = node.value if isinstance(node, ast.Expr) else None
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute) or \
            not call.func.attr.endswith("_") or call.func.attr.startswith("_"):
        return None
    target = ast.get_source_segment(line, call.func.value)
    if not isinstance(call.func.value, (ast.Name, ast.Attribute, ast.Subscript)):
        return None
    start = segment(line, call)[1]
    arguments = line[segment(line, call.func)[1]:start]
    return f"{target} = {target}.float().{call.func.attr[:-1]}{arguments}"


_HALF_DTYPES = frozenset(("float16", "half", "bfloat16"))


def casts_to_float32(line: str) -> str | None:
    """The line with each cast it makes to a half dtype made to float32 instead (`x.half()`,
    `.bfloat16()`, `torch.float16` as an argument): a line that casts and computes at once
    (`torch.sigmoid(x.half() @ w.half().t())`) computes in float32."""
    node = _statement(line)
    if node is None:
        return None
    spans = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute) and \
                sub.func.attr in ("half", "bfloat16") and not sub.args and not sub.keywords:
            spans.append(float_cast(line, sub))
        elif isinstance(sub, ast.Attribute) and sub.attr in _HALF_DTYPES and \
                isinstance(sub.value, ast.Name) and sub.value.id == "torch":
            spans.append((*segment(line, sub), "torch.float32"))
    for start, end, text in sorted(spans, reverse=True):
        line = line[:start] + text + line[end:]
    return line if spans else None


def float_cast(line: str, call: ast.Call) -> tuple[int, int, str]:
    """Where `x.half()`'s `half()` (or `bfloat16()`) stands in the line, and what makes it a
    float32 cast."""
    return segment(line, call.func)[1] - len(call.func.attr), segment(line, call)[1], "float()"


def cast_back(line: str, expr: str | None) -> str | None:
    """The line with its result cast back to the dtype of `expr` (`h = (...).to(x.dtype)`):
    the next line gets the dtype it had."""
    node = _statement(line)
    if expr is None or not isinstance(node, (ast.Assign, ast.Return)) or node.value is None:
        return None
    start, end = segment(line, node.value)
    value = line[start:end]
    return f"{line[:start]}{_atom(value, node.value)}.to({expr}.dtype){line[end:]}"
