"""A finding's evidence as a person reads it (the window's detail panel): each key as words, not
the --json name, and each value as a phrase or a sentence: where a dtype came from said as why
("float16, because it was loaded with dtype=torch.float16 at line 13"), what kind of loss as
what happened to the values, a script line as its file and line. The --json document keeps the
keys and values as they are (CONTRACT §2); this is only how they are said.
"""

from __future__ import annotations

from pathlib import PurePath

from ..diagnostics.rules.words import origin_phrase
from . import vocabulary

# Keys whose --json name is not words a person would use; any other key is said as it is
# written, its underscores spaces ("module class", "input dtype").
LABELS = {
    "kind": "what happened",
    "op": "operation",
    "lost": "positions lost",
    "total": "positions in all",
    "calls": "calls seen",
    "unmeasured": "calls not measured (past the time budget)",
    "landing": "where the error lands",
    "proof": "the first fix",
    "provenance": "the model's dtype",
    "input_provenance": "the inputs' dtypes",
    "source": "script line",
    "fed": "fed to the model as",
    "stored": "stored as",
    "held": "held by the dtype as",
    "mostly": "mostly absorbed",
    "nonfinite": "inf/NaN values",
    "keep_fp32": "kept in float32",
    "run_in_float32": "run in float32",
    "model_cast": "model cast to",
    "input_cast": "inputs cast to",
    "map_dtype": "Dataset.map dtype",
    "torch_autocast": "torch autocast",
    "with_labels": "with labels",
    "tolist": ".tolist() seen",
}

# What each kind of loss or failure (evidence "kind") means, said of the values.
KINDS = {
    "overflow": "finite values became inf or NaN (past the dtype's largest number)",
    "absorbed": "additions to a total left it unchanged (too small for the total's precision)",
    "collapsed": "distinct values became equal (too close for the dtype to tell apart)",
    "integer-range": "integers past those the dtype holds exactly were rounded",
    "constant": "a constant was stored as another value",
    "relative-error": "values drifted from float32's by a relative error",
    "zeroed": "values became exactly 0",
    "one": "values became exactly 1.0",
    "rounding": "rounding built up over the calls",
    "zero-gradients": "every gradient was zero",
    "nan-after-step": "NaN appeared after an optimizer step",
    "every-step-skipped": "the gradient scaler skipped every step",
}


def evidence_rows(location: str, evidence: dict) -> list[tuple[str, str]]:
    """(label, what it says) for the finding's location and each piece of its evidence."""
    rows = [("location", location)] if location else []
    return rows + [(label(key), said(key, value)) for key, value in evidence.items()]


def label(key: str) -> str:
    return LABELS.get(key, key.replace("_", " "))


def said(key: str, value) -> str:
    """`value` of the evidence's `key` in words."""
    if key == "kind" and isinstance(value, str):
        return KINDS.get(value, value.replace("-", " "))
    if key == "proof" and isinstance(value, str):
        return "proven on a copy of the script" if value == "proven" else value or "not tried"
    if is_provenance(value):
        return provenance_sentence(value)
    if isinstance(value, dict) and value and all(map(is_provenance, value.values())):
        return "; ".join(f"{name} is {provenance_sentence(p)}" for name, p in value.items())
    if isinstance(value, dict) and "line" in value and ("file" in value or len(value) == 1):
        return script_place(value)
    if isinstance(value, dict):
        return ", ".join(f"{label(k)}: {said(k, v)}" for k, v in value.items()) or "—"
    return vocabulary.evidence_value(value)


def is_provenance(value) -> bool:
    return isinstance(value, dict) and {"dtype", "from"} <= value.keys()


def provenance_sentence(p: dict) -> str:
    """"float16, because it was loaded with dtype=torch.float16 at line 13"."""
    return f"{p['dtype']}, because {origin_phrase(p)}"


def script_place(place: dict) -> str:
    """A place in the user's script ({"file", "line"}, and what else it says) in words:
    "map_cast.py, line 31"; the rest after it."""
    where = ", ".join(part for part in (PurePath(place["file"]).name if place.get("file") else "",
                                        f"line {place['line']}" if place.get("line") else "") if part)
    rest = {k: v for k, v in place.items() if k not in ("file", "line") and v is not None}
    return where + (f" ({said('', rest)})" if rest else "")
