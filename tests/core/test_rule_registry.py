"""One registry of rules (issue 27): every finding is made in core/diagnostics/rules, each code
by one owner, and what a finding says and fixes agrees with the evidence it carries.

The invariants run the forward-pass rules over evidence made to vary (hypothesis): where the
model's and the inputs' dtypes came from, the device, whether the batch is on it, a failure,
the names the user's script gives the model, its output and its batch.
"""

import ast
import dataclasses
import io
import re
import tokenize
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from fix_code import parses

import fp16studio
from fp16studio.core.data.columns import ColumnFacts
from fp16studio.core.diagnostics import rules
from fp16studio.core.diagnostics.findings import CODES, Finding
from fp16studio.core.diagnostics.report import RunError
from fp16studio.core.diagnostics.rules import Evidence, run_rules
from fp16studio.core.diagnostics.rules.edits import NAMES, Batch, Names
from fp16studio.core.run.trace import ModuleCall, TensorInfo
from fp16studio.core.spec.value import PipelineSpec

PACKAGE = Path(fp16studio.__file__).parent
RULES = PACKAGE / "core" / "diagnostics" / "rules"
ORIGINS = ("dtype-argument", "checkpoint", "config", "default-dtype", "cast", "processor",
           "dataset", "autocast", "library")
# Spec keys a fix sets to a dtype, and to a device: the fix's code must name what it sets.
DTYPE_KEYS = ("model_dtype", "model_cast", "input_dtype", "autocast")
DEVICE_KEYS = {"device": {"auto": "cuda"}, "input_device": {"model": "{model}.device"},
               "autocast_device": {}}
# The user's names as scripts write them: today's words, and a script's own.
SCRIPT_NAMES = (NAMES, Names(batch=Batch("batch")), Names(batch=Batch("input_tensor", False)),
                Names(model="net", batch=Batch("enc"), call="net(**enc)", output="out"),
                Names(model="self.model", batch=Batch("x", False), call="self.model(x, mask=m)"))


def finding_calls(path: Path) -> list[ast.Call]:
    tree = ast.parse(path.read_text())
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name) and node.func.id == "Finding"]


def test_only_the_registry_makes_findings():
    makers = sorted(str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                    if finding_calls(path) and RULES not in path.parents)
    assert makers == []


def test_every_code_has_exactly_one_owner_and_owners_make_only_their_own():
    owned = [code for family in rules.FAMILIES for code in family.OWNS]
    assert sorted(owned) == sorted(CODES) and len(owned) == len(set(owned))
    for family in rules.FAMILIES:
        made = {call.args[0].value for call in finding_calls(Path(family.__file__))
                if call.args and isinstance(call.args[0], ast.Constant)}
        assert made <= set(family.OWNS), (family.__name__, made - set(family.OWNS))
    assert rules.owner("precision-flag") is rules.flags


# A finding is final when its owner returns it (issue 39, item 6): placement, "caught by the
# script" and the islands search are passed into the rules (Evidence.place, Evidence.islands).
FINDING_FIELDS = {f.name for f in dataclasses.fields(Finding)}


def finding_edits(path: Path) -> list[int]:
    """Lines of `replace(x, k=...)` / `dataclasses.replace(...)` calls whose every keyword is a
    Finding field: a Finding edited (no other dataclass here is edited by those names alone)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.Call) or not node.keywords:
            continue
        name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
        keys = {k.arg for k in node.keywords}
        if name == "replace" and None not in keys and keys <= FINDING_FIELDS:
            lines.append(node.lineno)
    return lines


def test_no_finding_is_edited_after_its_owner_returns_it():
    editors = {str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
               if RULES not in path.parents and finding_edits(path)}
    assert editors == set(), "dataclasses.replace of a Finding outside rules/"


# -- evidence made to vary ------------------------------------------------------------------------

def tensor(dtype, device="cpu", absmax=1.0):
    return TensorInfo(name="x", dtype=dtype, device=device, shape=(2, 8), absmax=absmax)


def call(index, name, cls, inputs, outputs, param_dtype, param_device="cpu", completed=True):
    return ModuleCall(index=index, name=name, cls=cls, params={param_dtype: 64},
                      param_devices=(param_device,), inputs=inputs, outputs=outputs,
                      completed=completed, finished=index)


@st.composite
def evidences(draw):
    model = draw(st.sampled_from(("float16", "bfloat16", "float32")))
    given_in = draw(st.sampled_from(("float16", "bfloat16", "float32")))
    device = draw(st.sampled_from(("cpu", "cuda")))
    batch_device = draw(st.sampled_from((device, "cpu", "meta")))
    origin = draw(st.sampled_from(ORIGINS))
    input_origin = draw(st.sampled_from(ORIGINS))
    line = draw(st.none() | st.integers(1, 400))
    autocast = draw(st.sampled_from((None, "float16", "bfloat16")))
    autocast_device = draw(st.sampled_from((None, "cpu", "cuda")))
    failure = draw(st.sampled_from((None, "dtype", "device", "kernel")))
    training = draw(st.booleans())
    spec = PipelineSpec(model="m", dataset="synthetic",
                        model_dtype="auto" if origin == "checkpoint" else model,
                        model_cast=model if origin == "cast" and model != "float32" else None,
                        input_dtype=given_in if given_in != "float32" else None,
                        autocast=autocast if autocast != "float32" else None,
                        autocast_device=autocast_device if autocast else None)
    source = {"file": "script.py", "line": line} if line else None
    messages = {"dtype": f"Input type ({given_in}) and weight type ({model}) should be the same",
                "device": "Expected all tensors to be on the same device, but found at least two "
                          "devices, cuda:0 and cpu!",
                "kernel": f"\"addmm\" not implemented for '{'Half' if model == 'float16' else 'BFloat16'}'"}
    error = RunError("RuntimeError", messages[failure], "forward", "encoder") if failure else None
    calls = [call(0, "encoder", "Linear", [tensor(given_in, batch_device)],
                  [tensor(model, device)], model, device, completed=failure is None)]
    facts = {"pixel_values": ColumnFacts("pixel_values", stored="float32", loaded="float32",
                                         final=given_in, device=batch_device, shape=(2, 8))}
    return Evidence(
        spec=spec, device_type=device, param_dtypes={model: 10}, module_param_dtypes={"encoder": model},
        facts=facts, calls=calls, error=error,
        provenance={"dtype": model, "from": origin, "source": source, "training": training},
        input_provenance={"pixel_values": {"dtype": given_in, "from": input_origin,
                                           "source": source, "training": training}},
        sources={"autocast": source} if autocast else {},
        names=draw(st.sampled_from(SCRIPT_NAMES)))


def agrees(finding: Finding, ev: Evidence):
    text = finding.message
    provenance = finding.evidence.get("provenance")
    froms = {p["from"] for p in (provenance, ev.provenance) if p}
    if "checkpoint" in text:
        assert "checkpoint" in froms, text
    if "was cast to" in text:
        assert "cast" in froms, text
    if "was not moved" in text:
        params = {d for c in ev.calls for d in c.param_devices}
        assert not {f.device for f in ev.facts.values()} <= params, text
    for fix in finding.fixes:
        code = fix.code_text()
        assert parses(code), (fix.id, code)
        for key in DTYPE_KEYS:
            value = fix.edits.get(key)
            if value and value != "auto":
                assert f"torch.{value}" in code, (fix.id, key, code)
        for key, shown in DEVICE_KEYS.items():
            value = fix.edits.get(key)
            if value:
                assert shown.get(value, value).format(model=ev.names.model) in code, \
                    (fix.id, key, code)
        assert "torch.cuda)" not in code and "torch.cpu)" not in code, code
        for called in re.findall(r"model\((?:\*\*)?\w+\)", code):   # the model called
            assert called == ev.names.called(), code
        assert not written_words(code) - users_words(ev.names), code


def written_words(code: str) -> set:
    """Today's words for the user's things that the code uses as names (not in a comment)."""
    tokens = tokenize.generate_tokens(io.StringIO(code.strip() + "\n").readline)
    return {t.string for t in tokens if t.type == tokenize.NAME} & {
        "model", "outputs", "inputs", "loss", "optimizer", "scaler"}


def users_words(names: Names) -> set:
    return {*names.model.split("."), names.output or "outputs", names.batch.name, names.loss,
            names.optimizer, names.scaler}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(evidences())
def test_every_finding_agrees_with_its_evidence(ev):
    for finding in run_rules(ev):
        agrees(finding, ev)


# -- drift's sentence (rules/ranges.py drift_finding) ----------------------------------------------

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 2), st.floats(0.0, 60.0)), min_size=1, max_size=4))
def test_drift_says_where_inf_first_appears_only_where_it_does(rows):
    """A drift whose output is not finite: the module its sentence says inf/NaN first appear in
    holds some (the evidence's "non-finite values")."""
    from fp16studio.core.diagnostics.rules.ranges import drift_finding
    from fp16studio.core.precision.drift import DriftResult, ModuleDrift
    from fp16studio.core.run.compare import OutputDrift

    modules = [ModuleDrift(f"layer{i}", "Linear", 0, 0.1, 0.9, sqnr, 1.0, 1.0, nonfinite)
               for i, (nonfinite, sqnr) in enumerate(rows)]
    diverged = [m for m in modules if m.diverged]
    if not diverged or not any(m.nonfinite for m in modules):
        return
    result = DriftResult("float16", "cpu", first_divergent=diverged[0].name, modules=modules,
                         output=OutputDrift(sqnr_db=5.0, cosine=0.5, max_abs_diff=1.0, nonfinite=3))
    finding = drift_finding(PipelineSpec(model="m", dataset="synthetic"), result, "float16", None)
    said = re.search(r"first appear in the output of ([\w.]+?)[,.]", finding.message)
    if said:
        where = next(m for m in modules if m.name == said.group(1))
        assert where.nonfinite > 0, finding.message
