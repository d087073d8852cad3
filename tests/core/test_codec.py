"""The one codec (core/common/codec.py): every document type round-trips through JSON text,
what it writes fits its schema, and a document that does not fit is refused in one line that
says where. Instances are drawn by hypothesis from the definitions' own type hints, so a field
added to any document is covered without touching this file."""

import dataclasses
import json
import types
import typing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fp16studio.core.common import codec
from fp16studio.core.common.codec import DecodeError
from fp16studio.core.diagnostics.findings import CodeEdit, Finding, Fix
from fp16studio.core.diagnostics.report import Environment, ModelOutput, NonFinite, RunError, StepRecord
from fp16studio.core.diagnostics.tree import Inventory, TensorNode
from fp16studio.core.precision.bench import BatchInfo, Latency, Tf32Settings, VariantResult
from fp16studio.core.run.compare import OutputDrift
from fp16studio.core.script.rank_summary import (Disagreement, FirstFailed, FirstNonfinite,
                                                 RankedFinding, RankRow, RankSummary)
from fp16studio.core.present.schemas import document_types
from fp16studio.core.spec.value import PipelineSpec
from json_schemas import valid

NAMES = document_types()
INNER = (Finding, Fix, CodeEdit, TensorNode, VariantResult, Latency, BatchInfo, Tf32Settings,
         Inventory, ModelOutput, RunError, OutputDrift, RankSummary, RankRow, FirstNonfinite,
         FirstFailed, Disagreement, RankedFinding, StepRecord, NonFinite, Environment)

JSON_SCALARS = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=6) \
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)
SPECS = st.builds(
    PipelineSpec, model=st.sampled_from(["org/model", "models/tiny-bert"]),
    dataset=st.sampled_from(["synthetic", "data/rows.csv"]),
    model_dtype=st.sampled_from(["float32", "float16", "bfloat16", "auto"]),
    samples=st.integers(1, 64), batch_size=st.integers(1, 8),
    keep_fp32=st.lists(st.sampled_from(["*.norm", "head"]), max_size=2).map(tuple),
    autocast=st.sampled_from([None, "float16", "bfloat16"]))


def strategy(hint, depth: int = 0):
    """Values of type `hint`, as the definitions declare them."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is PipelineSpec:
        return SPECS
    if dataclasses.is_dataclass(hint):
        return objects(hint, depth)
    if isinstance(hint, type) and issubclass(hint, dict) and hasattr(hint, "__total__"):
        hints = typing.get_type_hints(hint)
        required = hint.__required_keys__
        return st.fixed_dictionaries(
            {k: strategy(h, depth) for k, h in hints.items() if k in required},
            optional={k: strategy(h, depth) for k, h in hints.items() if k not in required})
    if origin in (typing.Union, types.UnionType):
        return st.one_of([strategy(a, depth) for a in args])
    if origin is list or origin is tuple:
        empty = origin()
        if depth > 1:   # deep enough: a tree's grandchildren are leaves
            return st.just(empty)
        items = st.lists(strategy(args[0], depth + 1), max_size=2)
        return items.map(tuple) if origin is tuple else items
    if origin is dict:
        return st.dictionaries(st.text(max_size=6), strategy(args[1], depth), max_size=3)
    simple = {type(None): st.none(), bool: st.booleans(), str: st.text(max_size=8),
              int: st.integers(-2**40, 2**40),
              float: st.floats(allow_nan=False, allow_infinity=False),
              dict: st.dictionaries(st.text(max_size=6), JSON_VALUES, max_size=3),
              list: st.lists(JSON_VALUES, max_size=3), typing.Any: JSON_VALUES}
    return simple[hint]


def objects(cls, depth: int = 0):
    hints = typing.get_type_hints(cls)
    fields = {}
    for f in dataclasses.fields(cls):
        opts = f.metadata.get("json", {})
        if opts.get("skip") or not f.init:
            continue
        fields[f.name] = (st.sampled_from(opts["enum"]) if opts.get("enum")
                          else strategy(hints[f.name], depth))
    return st.builds(cls, **fields)


def through_text(doc):
    return json.loads(json.dumps(doc))


ALL_TYPES = list(NAMES.values()) + list(INNER)


@pytest.mark.parametrize("cls", ALL_TYPES, ids=lambda c: c.__name__)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_type_round_trips_through_json_text(cls, data):
    """from_json(to_json(x)) == x, with everything that crosses a process (full=True)."""
    x = data.draw(objects(cls) if cls is not PipelineSpec else SPECS)
    assert cls.from_json(through_text(x.to_json(full=True))) == x


@pytest.mark.parametrize("name", sorted(NAMES))
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_document_fits_its_schema(name, data):
    cls = NAMES[name]
    x = data.draw(objects(cls) if cls is not PipelineSpec else SPECS)
    valid(name, through_text(x.to_json()))


def test_a_fix_travels_whole_with_its_rendered_code():
    """The contract's `code` (the text to write) stays; the edit it came from and the fix's
    explanation travel too, so a program that reads --json can apply it."""
    edit = CodeEdit("model = model.float()", "replace", {"file": None, "line": 3})
    fix = Fix("model-float32", "Keep the model in float32", {}, "why it works", edit)
    doc = fix.to_json()
    assert doc["code"] == "model = model.float()" and doc["explain"] == "why it works"
    assert Fix.from_json(doc) == fix
    finding = Finding("overflow", "error", "m", "msg", fixes=(fix,), source={"file": "a.py", "line": 3})
    assert finding.to_json()["source"] == {"file": "a.py", "line": 3}


@pytest.mark.parametrize("doc, where", [
    ({"code": "made-up", "severity": "error", "location": "", "message": ""}, "code"),
    ({"code": "overflow", "severity": "error", "location": None, "message": ""}, "location"),
    ({"code": "overflow", "severity": "error", "location": "", "message": "",
      "fixes": [{"title": "t", "edits": {}}]}, "fixes[0]: no 'id'"),
    ({"code": "overflow", "severity": "error", "location": "", "message": "", "evidence": [1]},
     "evidence"),
    ([1], "not an object"),
])
def test_a_document_that_does_not_fit_is_refused_in_one_line_saying_where(doc, where):
    with pytest.raises(DecodeError) as caught:
        Finding.from_json(doc)
    message = str(caught.value)
    assert where in message and "\n" not in message


def test_keys_a_newer_version_added_are_read_past():
    doc = Finding("overflow", "error", "m", "msg").to_json()
    assert Finding.from_json({**doc, "added_later": 1}) == Finding("overflow", "error", "m", "msg")


def test_a_number_no_reader_can_hold_is_refused():
    """The window's charts divide what they draw as floats: an integer past a float's range is
    refused where it is read, as a field and alone."""
    from fp16studio.core.precision.bench import BenchResult

    with pytest.raises(DecodeError, match=r"variants\[0\]\.peak_memory_bytes: a number too large"):
        BenchResult.from_json({"device": "cpu", "variants": [{"name": "float16",
                                                              "peak_memory_bytes": 10 ** 400}]})
    with pytest.raises(DecodeError, match="too large"):
        codec.decode(int, 10 ** 400)
