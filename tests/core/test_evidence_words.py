"""A finding's evidence in words (issue 43): the detail panel's rows say each key as words and
each value as a phrase: a dtype's provenance as why it is that dtype, a kind of loss as what
happened to the values, a script place as its file and line; never JSON, never a raw name."""

import re

import pytest

from fp16studio.core.diagnostics.rules.values import _WORDS as LOSS_KINDS
from fp16studio.core.present.evidence_words import KINDS, evidence_rows

ORIGINS = ("dtype-argument", "checkpoint", "config", "default-dtype", "cast", "processor", "dataset",
           "autocast", "optimizer", "library")
RAW = re.compile(r"[{}\[\]]|\b(from|source|dtype-argument|default-dtype|None|null|True|False)\b:?")


def words(location, evidence) -> str:
    return " | ".join(f"{k}: {v}" for k, v in evidence_rows(location, evidence))


@pytest.mark.parametrize("origin", ORIGINS)
def test_a_dtypes_provenance_is_a_sentence(origin):
    provenance = {"dtype": "float16", "from": origin, "source": {"file": "/w/train.py", "line": 13},
                  "training": False}
    text = words("model", {"provenance": provenance,
                           "input_provenance": {"pixel_values": dict(provenance, source=None)}})
    assert "float16, because" in text and "pixel_values is float16, because" in text
    assert not RAW.search(text.replace("the model's dtype:", "")), text


def test_every_kind_of_loss_is_said_as_what_happened():
    assert set(LOSS_KINDS) <= set(KINDS)   # a kind added to the rules needs its words here
    for kind in LOSS_KINDS:
        rows = dict(evidence_rows("train.py:20", {"kind": kind, "op": "sum", "dtype": "float16"}))
        assert rows["what happened"] != kind and len(rows["what happened"].split()) >= 4


def test_script_places_and_nested_evidence_read_as_words():
    text = words("loss:40", {"landing": {"file": "/w/train.py", "line": 40, "how": "loss", "error": 0.25,
                                         "nonfinite": 0, "zeroed": None, "calls": 3},
                             "proof": "proven", "model_cast": "float16", "finite": False})
    assert "where the error lands: train.py, line 40 (" in text and "proven on a copy" in text
    assert "model cast to: float16" in text and "finite: no" in text
    assert "_" not in text.replace("model_cast", "") and not RAW.search(text), text
