"""Rules: read the evidence of one run and say what is wrong, in plain words, with fixes.

Evidence first: the tracer's per-module records, the batch facts, the model's parameters. The
exception text only supports a rule (its wording differs across CPU, CUDA and torch versions).
Each rule is a function `(Evidence) -> list[Finding]`; fixes are ordered so the first keeps
what the user was after (half precision stays half where it can work).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass, field

from ..common.dtypes import HALF_NAMES, is_floating_name
from ..data.columns import ColumnFacts
from ..hf.loading import is_oom, resolve_device
from ..run.trace import ModuleCall
from ..spec.value import PipelineSpec
from .findings import Finding, Fix, by_severity

FP16_MAX = 65504.0
_DTYPE_ERRORS = re.compile(
    r"should be the same|must have the same dtype|expected scalar type|expected both|"
    r"mixed dtype|expected m1 and m2 to have the same dtype|found at least two dtypes|"
    r"expected .*dtype.* but got", re.I)
_DEVICE_ERRORS = re.compile(r"same device|found at least two devices|"
                            r"torch\.cuda\.\w+Tensor\) and weight type \(torch\.\w+Tensor", re.I)
_HALF_KERNEL_ERRORS = re.compile(
    r"not implemented for '(Half|BFloat16)'|Unsupported dtype (Half|BFloat16)|"
    r"Low precision dtypes not supported", re.I)
_INTEGER_ERRORS = re.compile(r"indices|scalar types: Long|expected target dtype|"
                             r"Target size .* must be the same as input size|Long but", re.I)
# BCE-with-logits given integer targets (a multi-label classifier fed multi-hot int64 labels).
_MULTI_LABEL_ERRORS = re.compile(r"result type Float can't be cast to the desired output type Long|"
                                 r"Found dtype Long but expected Float", re.I)
_LIST_ERRORS = re.compile(r"'list' object has no attribute", re.I)
# Modules that do the floating work; their output dtype is the compute dtype of a run.
_COMPUTE_CLASSES = re.compile(r"Linear|Conv\dd|Conv1D|Bilinear")


@dataclass
class Evidence:
    spec: PipelineSpec
    device_type: str                      # where the model runs: cpu, cuda, mps
    param_dtypes: dict                    # floating dtype -> parameter count (whole model)
    module_param_dtypes: dict             # module name -> floating dtype of its own parameters
    keep_in_fp32: tuple = ()              # the library's own fp32 module patterns
    facts: dict = field(default_factory=dict)    # batch key -> ColumnFacts
    calls: list = field(default_factory=list)    # ModuleCall, in call order
    error: dict | None = None             # {"type", "message", "stage", "module"}
    exception: BaseException | None = None
    # Where the model's dtype came from: {"dtype", "from", "source", "training"} (CONTRACT §2;
    # core/script/provenance.py, spec_provenance for a spec run); None where unknown.
    provenance: dict | None = None
    input_provenance: dict = field(default_factory=dict)   # batch key -> the same, of its dtype

    @property
    def failed(self) -> bool:
        return self.error is not None

    @property
    def message(self) -> str:
        return self.error["message"] if self.error else ""

    @property
    def failed_call(self) -> ModuleCall | None:
        if not self.error or self.error.get("stage") != "forward":
            return None
        return next((c for c in reversed(self.calls) if not c.completed), None)

    def returned(self) -> list[ModuleCall]:
        """Completed calls in the order they returned: the innermost module first."""
        return sorted((c for c in self.calls if c.completed), key=lambda c: c.finished)

    def explained_fp32(self, module: str) -> bool:
        """A module kept in float32 on purpose: by the user's keep_fp32 or run_in_float32, or by
        the library."""
        islands = [(p, f"{p}.*") for p in self.spec.run_in_float32]  # with what is inside
        patterns = (tuple(self.spec.keep_fp32) + sum(islands, ())
                    + tuple(f"*{p}*" for p in self.keep_in_fp32))
        return any(fnmatch.fnmatchcase(module, p) for p in patterns)

    def compute_dtypes(self) -> dict:
        """dtype -> count of outputs of the modules that do the floating work."""
        counts: dict = {}
        for call in self.calls:
            if call.completed and call.params and _COMPUTE_CLASSES.search(call.cls):
                for out in call.outputs[:1]:
                    counts[out.dtype] = counts.get(out.dtype, 0) + 1
        return counts

    def half_requested(self) -> str | None:
        """The half dtype the pipeline asks for anywhere, if any."""
        s = self.spec
        for value in (s.model_dtype, s.model_cast, s.input_dtype, s.format_dtype, s.autocast,
                      s.map_dtype):
            if value in HALF_NAMES:
                return value
        for fact in self.facts.values():
            if fact.intended in HALF_NAMES:
                return fact.intended
        return None


# -- fixes ------------------------------------------------------------------------------------

def fix_cast_inputs(ev: Evidence, dtype: str) -> Fix:
    edits = {"input_dtype": dtype, "input_cast": "floating"}
    if ev.spec.map_dtype:
        edits["map_dtype"] = None
    return Fix(f"cast-inputs-{dtype}", f"Cast the floating inputs to {dtype}", edits,
               f"cast floating batch tensors to {dtype} right before the forward pass "
               "(ids and masks stay integer)")


def fix_model_dtype(dtype: str, ev: Evidence) -> Fix:
    edits = {"model_dtype": dtype}
    if ev.spec.model_cast and ev.spec.model_cast != dtype:
        edits["model_cast"] = None  # a cast after loading would undo the load dtype
    if ev.spec.input_dtype and ev.spec.input_dtype != dtype:
        edits["input_dtype"] = dtype if dtype != "float32" else None
    if ev.spec.autocast and dtype != "float32":
        edits["autocast"] = None
    verb = "Keep the model in float32" if dtype == "float32" else f"Load the model in {dtype}"
    return Fix(f"model-{dtype}", verb, edits,
               f"load the model with from_pretrained(..., dtype=torch.{dtype})")


def fix_autocast(dtype: str) -> Fix:
    return Fix(f"autocast-{dtype}", f"Keep float32 weights and run under autocast({dtype})",
               {"model_dtype": "float32", "model_cast": None, "input_dtype": None,
                "format_dtype": None, "map_dtype": None, "autocast": dtype},
               f"float32 weights, forward pass under torch.autocast(device_type, dtype=torch.{dtype})")


def _fix_load_instead_of_cast(ev: Evidence) -> Fix:
    dtype = ev.spec.model_cast
    return Fix(f"load-{dtype}-not-cast", f"Load in {dtype} with dtype= instead of model.half()",
               {"model_cast": None, "model_dtype": dtype},
               f"from_pretrained(..., dtype=torch.{dtype}) keeps the modules the library runs in "
               f"float32 ({', '.join(ev.keep_in_fp32)}); model.half() casts them too")


# -- provenance -------------------------------------------------------------------------------

def spec_provenance(spec: PipelineSpec, param_dtypes: dict) -> tuple[dict | None, dict]:
    """(the model's, batch key -> input's) provenance in a spec run, from the spec's own keys:
    model_cast is a cast, model_dtype auto the checkpoint's dtype, any other a dtype= argument."""
    if not param_dtypes:
        return None, {}
    dtype = max(param_dtypes, key=param_dtypes.get)
    training = getattr(spec, "train", None) is not None
    origin = ("cast" if spec.model_cast else "checkpoint" if spec.model_dtype == "auto"
              else "dtype-argument")
    inputs = {}
    for key, value in (("input_dtype", spec.input_dtype), ("format_dtype", spec.format_dtype)):
        if value:
            inputs[key] = {"dtype": value, "from": "cast" if key == "input_dtype" else "dataset",
                           "source": None, "training": training}
    return {"dtype": dtype, "from": origin, "source": None, "training": training}, inputs


def _input_origin(ev: Evidence, dtype: str | None, key: str | None = None) -> dict | None:
    """The provenance of the batch tensor `key` (else the first of `dtype`)."""
    found = ev.input_provenance.get(key) if key else None
    if found is None and dtype:
        found = next((p for p in ev.input_provenance.values() if p["dtype"] == dtype), None)
    if found is None and dtype and ev.spec.input_dtype == dtype:   # a spec run
        found = ev.input_provenance.get("input_dtype")
    if found is None and dtype and ev.spec.format_dtype == dtype:
        found = ev.input_provenance.get("format_dtype")
    return found


def _model_origin(ev: Evidence, dtype: str | None = None) -> dict | None:
    p = ev.provenance
    return p if p is not None and (dtype is None or p["dtype"] == dtype) else None


def _autocast_origin(ev: Evidence, dtype: str) -> dict:
    return {"dtype": dtype, "from": "autocast", "source": None,
            "training": bool(ev.provenance and ev.provenance.get("training"))}


def _with_origin(evidence: dict, origin: dict | None) -> dict:
    return dict(evidence, provenance=origin) if origin is not None else evidence


def _unasked_half(ev: Evidence, origin: dict | None = None) -> dict | None:
    """The provenance (the model's, else `origin`) when its half dtype is one the user did not
    ask for: the config's or the default dtype's, or the checkpoint's for a model meant to train
    (CONTRACT §2)."""
    p = origin if origin is not None else ev.provenance
    if not p or p["dtype"] not in HALF_NAMES:
        return None
    if p["from"] in ("config", "default-dtype") or (p["from"] == "checkpoint" and p.get("training")):
        return p
    return None


def _origin_story(p: dict) -> str:
    """Why the model is in the dtype it is, said from its provenance."""
    dtype, where = p["dtype"], _at_line(p.get("source"))
    if p["from"] == "config":
        return (f"The model is {dtype} because from_config took the config's dtype{where} "
                f"(config.dtype = {dtype}; transformers 4.56 and later build the model in it). A "
                "model built to train from scratch belongs in float32 (mixed precision comes from "
                f"autocast): pass dtype=torch.float32 to from_config rather than casting the "
                f"inputs to {dtype}.")
    if p["from"] == "default-dtype":
        return (f"The model is {dtype} because torch.set_default_dtype(torch.{dtype}){where} "
                f"makes every new parameter and tensor {dtype}; what comes from elsewhere (numpy, a "
                "dataset, a processor) stays float32. Keep torch's default float32 and ask for half "
                "precision where it works (dtype= at load, or autocast).")
    return (f"The model is {dtype} because from_pretrained got no dtype={where}: transformers 5 "
            "loads the checkpoint's own dtype. The model is trained here: load it in float32 "
            "(dtype=torch.float32) and train with autocast.")


def _at_line(source: dict | None) -> str:
    return f" at line {source['line']}" if source and source.get("line") else ""


def fix_float32_at_origin(ev: Evidence, p: dict) -> Fix:
    """Make the model float32 where its unasked half dtype came from. The explain is the line to
    write (core/script/fixes.py): the user's own call with dtype=torch.float32, where known."""
    dtype, line = p["dtype"], source_line(p.get("source"))
    if p["from"] == "config":
        code = (with_argument(line, "from_config", "dtype=torch.float32")
                or "model = AutoModel.from_config(config, dtype=torch.float32)")
        return Fix("from-config-float32", "Build the model in float32: "
                   "from_config(config, dtype=torch.float32)", {"model_dtype": "float32"},
                   f"{code}  # the config says {dtype}; train from scratch in float32 weights")
    if p["from"] == "default-dtype":
        return Fix("default-dtype-float32", "Keep torch's default dtype float32",
                   {"model_dtype": "float32"},
                   f"torch.set_default_dtype(torch.float32)  # torch's default, not {dtype}; ask "
                   "for half precision with dtype= at load, or autocast")
    code = (with_argument(line, "from_pretrained", "dtype=torch.float32")
            or "model = AutoModel.from_pretrained(..., dtype=torch.float32)")
    return Fix("load-float32", "Load the model in float32: from_pretrained(..., dtype=torch.float32)",
               fix_model_dtype("float32", ev).edits,
               f"{code}  # the checkpoint is stored in {dtype}; train float32 weights")


def _origin_first(ev: Evidence, fixes, origin: dict | None = None) -> tuple:
    """The fixes, with the one at the dtype's origin (the model's, else `origin`) first where the
    user never asked for that dtype."""
    p = _unasked_half(ev, origin)
    if p is None:
        return tuple(f for f in fixes if f is not None)
    first = fix_float32_at_origin(ev, p)
    return (first,) + tuple(f for f in fixes if f is not None and f.id not in (first.id, "model-float32"))


def source_line(source: dict | None) -> str | None:
    """The text of a script's line, `source` = {"file", "line"} (trace), None where unknown."""
    import linecache

    if not source or not source.get("file") or not source.get("line"):
        return None
    return linecache.getline(source["file"], source["line"]).strip() or None


def with_argument(line: str | None, name: str, argument: str) -> str | None:
    """`line` with `argument` added to its call of `name(...)` (a function, a class, a method),
    when the whole call is on the line; the user's comment after it dropped."""
    if not line:
        return None
    match = re.search(rf"(?<![\w]){re.escape(name)}\(", line)
    if match is None:
        return None
    depth, opened = 0, match.end() - 1
    for i in range(opened, len(line)):
        depth += {"(": 1, ")": -1}.get(line[i], 0)
        if depth == 0:
            inside = line[opened + 1:i].strip().rstrip(",")
            rest = line[i:].split("#")[0].rstrip()   # the user's comment after the call goes
            return f"{line[:opened + 1]}{inside + ', ' if inside else ''}{argument}{rest}"
    return None


def _low_precision_for(ev: Evidence) -> str:
    """The half dtype to suggest: bfloat16 where float16 is slow or unsupported (CPU)."""
    return "bfloat16" if ev.device_type == "cpu" else "float16"


# -- rules ------------------------------------------------------------------------------------

def rule_list_batch(ev: Evidence) -> list[Finding]:
    # String labels come back as lists whatever the format: label-dtype's story.
    lists = [k for k, f in ev.facts.items() if f.loaded == "list" and not _strings(f)]
    if not lists:
        return []
    broke = ev.failed and (_LIST_ERRORS.search(ev.message) or ev.error["stage"] == "batch")
    return [Finding(
        "list-batch", "error" if broke else "warning", lists[0],
        f"The batch holds Python lists instead of tensors ({', '.join(lists)}): the dataset's "
        "format is 'python', so the DataLoader collates nested lists and `.to(...)` fails. Set "
        "the format to torch.",
        {"columns": lists, "format": ev.spec.format},
        (Fix("format-torch", "Return tensors: with_format('torch')", {"format": "torch"},
             "the dataset returns torch tensors (with_format('torch'))"),))]


def rule_map_cast_lost(ev: Evidence) -> list[Finding]:
    out = []
    for key, fact in ev.facts.items():
        if fact.intended not in HALF_NAMES or fact.loaded in (None, "list") \
                or fact.loaded == fact.intended:
            continue  # the finding is about half casts that Arrow storage undid
        by_user = not ev.spec.map_dtype
        where = "your preprocess function" if by_user else "Dataset.map"
        useless = ev.spec.input_dtype == fact.intended
        fix = fix_cast_inputs(ev, fact.intended)
        fix = Fix(fix.id, f"Cast {key} to {fact.intended} in the batch, not in map", fix.edits,
                  fix.explain)
        out.append(Finding(
            "map-cast-lost", "info" if useless else "warning", key,
            f"The cast of {key!r} to {fact.intended} inside {where} did not survive: datasets "
            f"stores map results in Arrow and with_format('torch') gives {fact.loaded} back, so "
            f"the model sees {fact.loaded}. Cast right before the forward pass instead"
            + (" (remove the .to() from your function: it has no effect)." if by_user else "."),
            {"cast in map": fact.intended, "stored as": fact.stored, "after DataLoader": fact.loaded},
            () if useless else (fix,)))
    return out


def rule_integer_cast(ev: Evidence) -> list[Finding]:
    cast = [k for k, f in ev.facts.items() if _integer(f) and f.final and is_floating_name(f.final)]
    if not cast:
        return []
    broke = ev.failed and bool(_INTEGER_ERRORS.search(ev.message))
    location = _received_by_failed_call(ev, cast) or next(
        (k for k in cast if k in ev.message), cast[0])
    dtype = ev.facts[location].final
    s = ev.spec
    fixes = []
    if s.format_dtype and is_floating_name(s.format_dtype):
        edits = {"format_dtype": None, "input_dtype": s.input_dtype or s.format_dtype,
                 "input_cast": "floating"}
        fixes.append(Fix("format-without-dtype", "Drop dtype from with_format; cast floating inputs "
                         "only", edits, "with_format('torch') without dtype: ids and labels stay "
                         "integer; floating inputs cast before the forward pass"))
    if s.input_cast == "all":
        fixes.append(Fix("cast-floating-only", "Cast floating tensors only",
                         {"input_cast": "floating"},
                         "cast only floating batch tensors; ids, masks and labels stay integer"))
    cause = ("with_format('torch', dtype=...) casts every column" if s.format_dtype
             else "the cast applies to every tensor of the batch")
    return [Finding(
        "integer-cast", "error" if broke else "warning", location,
        f"Integer tensors were cast to {dtype} ({', '.join(cast)}): {cause}. Token ids, attention "
        "masks and class labels must stay integer (embeddings need Long indices; float labels "
        "switch classifiers to a different loss).",
        _with_origin({"columns": {k: {"stored": ev.facts[k].stored, "fed": ev.facts[k].final}
                                  for k in cast}}, _input_origin(ev, dtype, location)),
        tuple(fixes))]


def _received_by_failed_call(ev: Evidence, keys: list) -> str | None:
    """The batch key whose tensor the failing module received (matched by shape and dtype)."""
    call = ev.failed_call
    if call is None:
        return None
    seen = {(t.shape, t.dtype) for t in call.inputs}
    matches = [k for k in keys if (ev.facts[k].shape, ev.facts[k].final) in seen]
    # A mask and the ids share shape and dtype; an embedding's input is the ids.
    matches.sort(key=lambda k: not (call.cls.endswith("Embedding") and k.endswith("input_ids")))
    return matches[0] if matches else None


def _strings(fact: ColumnFacts) -> bool:
    return fact.stored in ("string", "large_string")


def _integer(fact: ColumnFacts) -> bool:
    return bool(fact.stored) and fact.stored.startswith(("int", "uint", "bool"))


def rule_device_mismatch(ev: Evidence) -> list[Finding]:
    failed = ev.failed_call
    for call in ev.calls:
        if not call.param_devices:
            continue
        others = sorted({t.device for t in call.inputs} - set(call.param_devices))
        if not others:
            continue
        broke = call is failed
        if not broke and call.completed:
            continue  # the module moved its inputs itself (accelerate hooks do)
        return [_device_finding(ev, call.name, {"inputs on": others,
                                                "parameters on": list(call.param_devices)})]
    if ev.failed and _DEVICE_ERRORS.search(ev.message):
        return [_device_finding(ev, ev.error.get("module") or "model", {"error": ev.message})]
    return []


def _device_finding(ev: Evidence, location: str, evidence: dict) -> Finding:
    return Finding(
        "device-mismatch", "error", location or "model",
        "Tensors meeting in one operation live on different devices: the batch was not moved to "
        "the device of the module that consumes it first. Move the inputs to the model's device.",
        evidence,
        (Fix("inputs-to-model-device", "Move the inputs to the model's device",
             {"input_device": "model"}, "move every batch tensor to the model's (first) device"),))


def rule_dtype_mismatch(ev: Evidence) -> list[Finding]:
    failed = ev.failed_call
    autocast = bool(ev.spec.autocast)
    silent = []
    for call in ev.calls:
        param = call.param_dtype
        floats = [t for t in call.inputs if t.floating]
        wrong = [t for t in floats if param and t.dtype != param]
        if not wrong or call.cls.endswith(("Embedding", "EmbeddingBag")):
            # An embedding's input is indices: a floating one is integer-cast's story.
            continue
        if call is failed:
            producer = _kept_fp32_producer(ev, call, wrong[0].dtype)
            if producer is not None:
                return [_kept_fp32_finding(ev, producer, call, param)]
            return [_dtype_finding(ev, call, wrong[0].dtype, param, "error")]
        if not call.completed or autocast:
            continue
        handled = all(o.dtype == param for o in call.outputs if o.floating)
        if handled or ev.explained_fp32(call.name):
            continue  # the module casts its inputs itself (ViT, CLIP), or is fp32 on purpose
        silent.append((call, wrong[0].dtype, param))
    if ev.failed and failed is not None and _DTYPE_ERRORS.search(ev.message):
        # The clash happened inside functional code of a module without its own parameters.
        param = _nearest_param_dtype(ev, failed.name)
        inputs = [t.dtype for t in failed.inputs if t.floating]
        return [_dtype_finding(ev, failed, inputs[0] if inputs else None, param, "error")]
    if silent:
        call, got, param = silent[0]
        return [_dtype_finding(ev, call, got, param, "warning", others=len(silent) - 1)]
    return []


def _kept_fp32_producer(ev: Evidence, consumer: ModuleCall, got: str) -> ModuleCall | None:
    """The module the user keeps in float32 whose float32 output the failing module received."""
    if got != "float32" or not ev.spec.keep_fp32:
        return None
    before = [c for c in ev.calls if c.completed and c.index < consumer.index
              and not consumer.name.startswith(c.name)]
    for call in sorted(before, key=lambda c: c.finished, reverse=True):
        if any(o.dtype == got for o in call.outputs) and call.param_dtype == "float32":
            return call if _user_kept(ev.spec, call.name) else None
    return None


def _user_kept(spec: PipelineSpec, module: str) -> list[str]:
    return [p for p in spec.keep_fp32 if fnmatch.fnmatchcase(module, p)]


def _kept_fp32_finding(ev: Evidence, producer: ModuleCall, consumer: ModuleCall,
                       param: str) -> Finding:
    s = ev.spec
    patterns = _user_kept(s, producer.name)
    rest = [p for p in s.keep_fp32 if p not in patterns]
    fixes = (
        Fix("run-in-float32", f"Run {', '.join(patterns)} in float32, outputs cast back to {param}",
            {"keep_fp32": rest, "run_in_float32": list(s.run_in_float32) + patterns},
            f"the modules stay float32 inside, their outputs go back to {param} for the next one"),
        Fix("drop-keep-fp32", f"Stop keeping {', '.join(patterns)} in float32",
            {"keep_fp32": rest}, f"the modules run in {param} like the rest of the model"),
    )
    return Finding(
        "dtype-mismatch", "error", producer.name,
        f"{producer.name} ({producer.cls}) is kept in float32 by keep_fp32 ({', '.join(patterns)}), "
        f"so its output is float32, and the next module, {consumer.name} ({consumer.cls}), has "
        f"{param} weights. keep_fp32 keeps the weights, not the dtype between modules: run these "
        f"modules in float32 with their outputs cast back to {param}. Casting the batch changes "
        "nothing here.",
        _with_origin({"input dtype": "float32", "parameter dtype": param,
                      "produced by": producer.name, "module class": consumer.cls,
                      "consumer": consumer.name, **({"error": ev.message} if ev.message else {})},
                     _model_origin(ev, param)),
        fixes)


def _nearest_param_dtype(ev: Evidence, module: str) -> str | None:
    for name, dtype in ev.module_param_dtypes.items():
        if name.startswith(module):
            return dtype
    return None


def _dtype_finding(ev, call, got, param, severity, others=0) -> Finding:
    fixes = []
    origin = _model_origin(ev, param)
    unasked = _unasked_half(ev) if origin is not None else None
    if param in HALF_NAMES and got not in HALF_NAMES:
        fixes = [fix_cast_inputs(ev, param), fix_autocast(param), fix_model_dtype("float32", ev)]
        story = (f"The model's weights are {param} but its input is {got}: cast the floating "
                 f"inputs to {param}.")
        if unasked is not None:
            fixes, story = _origin_first(ev, fixes), _origin_story(unasked)
    elif param == "float32" and got in HALF_NAMES:
        fixes = [fix_model_dtype(got, ev), fix_autocast(got), _fix_drop_input_cast(ev)]
        origin = _input_origin(ev, got) or origin
        made = {"default-dtype": "made in", "dataset": "read as"}.get(
            origin["from"] if origin else "", "cast to")
        story = (f"The inputs were {made} {got} but the model stayed float32: load the model in "
                 f"{got} too, or keep float32 weights and let autocast pick precisions.")
        if origin is not None and origin["from"] == "default-dtype":
            # torch's default made them half, not the script's choice: undo that first.
            fixes = list(_origin_first(ev, fixes, origin))
            story = (f"The inputs are {got} because torch.set_default_dtype(torch.{got})"
                     f"{_at_line(origin.get('source'))} makes every new tensor {got}, but the "
                     "model is float32" + (
                         " (transformers 5 loads a checkpoint in its own dtype, whatever the "
                         "default)" if ev.provenance and ev.provenance["from"] == "checkpoint"
                         else "") + ". Keep torch's default float32.")
    elif param in HALF_NAMES and got in HALF_NAMES:
        fixes = [fix_cast_inputs(ev, param)]
        story = f"The model runs in {param} but its input is {got}."
    else:
        story = "The input's dtype and the weights' dtype differ."
    if ev.spec.model_dtype == "auto" and param in HALF_NAMES and unasked is None:
        story += (f" model_dtype auto loaded the checkpoint in its own dtype, {param}: "
                  "transformers 5 does that when from_pretrained gets no dtype=.")
    where = f"Module {call.name or 'model'} ({call.cls})"
    more = f" ({others} more modules alike)" if others else ""
    return Finding(
        "dtype-mismatch", severity, call.name or "model",
        f"{where} received a {got} input but its parameters are {param}{more}. {story}",
        _with_origin({"input dtype": got, "parameter dtype": param, "module class": call.cls,
                      **({"error": ev.message} if severity == "error" and ev.message else {})},
                     origin),
        tuple(f for f in fixes if f is not None))


def _fix_drop_input_cast(ev: Evidence) -> Fix | None:
    if not (ev.spec.input_dtype or ev.spec.format_dtype):
        return None
    return Fix("drop-input-cast", "Feed float32 inputs (no half precision)",
               {"input_dtype": None, "format_dtype": None}, "no cast of the inputs")


def rule_half_unsupported(ev: Evidence) -> list[Finding]:
    match = _HALF_KERNEL_ERRORS.search(ev.message) if ev.failed else None
    if not match:
        return []
    call = ev.failed_call
    module = (call.name if call else ev.error.get("module")) or "model"
    half = match.group(1) or ev.half_requested() or "float16"
    half = "bfloat16" if half.lower() == "bfloat16" else "float16"
    # Autocast keeps half precision for the matmuls and runs ops without half kernels in fp32.
    fixes = (fix_autocast(half), fix_model_dtype("float32", ev))
    origin = _model_origin(ev, half) or _input_origin(ev, half)
    if _model_origin(ev, half) is not None:
        fixes = _origin_first(ev, fixes)
    return [Finding(
        "half-unsupported", "error", module,
        f"An operator in {module} has no kernel for {half} on {ev.device_type} ({ev.message}). "
        "Keep float32 weights and run under autocast, which computes such operators in float32.",
        _with_origin({"error": ev.message, "device": ev.device_type, "dtype": half}, origin),
        fixes)]


def rule_half_on_cpu(ev: Evidence) -> list[Finding]:
    if ev.device_type != "cpu":
        return []
    # An autocast that names another device type does nothing here (autocast-inactive says so).
    autocast_fp16 = ev.spec.autocast == "float16" and ev.spec.autocast_device in (None, "cpu")
    fp16 = ev.param_dtypes.get("float16", 0) or ev.compute_dtypes().get("float16", 0) or autocast_fp16
    if not fp16:
        return []
    fixes = [fix_model_dtype("bfloat16", ev), fix_model_dtype("float32", ev)]
    origin = _model_origin(ev, "float16")
    if autocast_fp16:
        fixes = [fix_autocast("bfloat16"), fix_model_dtype("float32", ev)]
        origin = _autocast_origin(ev, "float16")
    elif origin is not None:
        fixes = list(_origin_first(ev, fixes))
    return [Finding(
        "half-on-cpu", "warning", "model",
        "float16 compute on a CPU: most CPUs have no fast float16 path, so this runs slower than "
        "float32, and some operators have no float16 kernel at all. On CPU use bfloat16 (or "
        "float32); keep float16 for the GPU.",
        _with_origin({"device": "cpu", "float16 parameters": ev.param_dtypes.get("float16", 0)},
                     origin),
        tuple(fixes))]


def rule_overflow(ev: Evidence) -> list[Finding]:
    for call in ev.returned():
        if not call.nonfinite_out or call.nonfinite_in:
            continue
        dtype = next((o.dtype for o in call.outputs if o.nonfinite), None)
        biggest = max((t.absmax for t in call.inputs if t.absmax is not None), default=None)
        fixes = []
        origin = (_autocast_origin(ev, dtype) if dtype and ev.spec.autocast == dtype
                  else _model_origin(ev, dtype) or _input_origin(ev, dtype))
        if dtype == "float16":
            fixes = [fix_model_dtype("bfloat16", ev), fix_model_dtype("float32", ev)]
            if ev.spec.model_cast == "float16" and ev.keep_in_fp32:
                fixes.insert(0, _fix_load_instead_of_cast(ev))
            if origin is not None and origin["from"] != "autocast":
                fixes = list(_origin_first(ev, fixes))
        return [Finding(
            "overflow", "error", call.name or "model",
            f"inf/NaN first appeared in the output of {call.name or 'the model'} ({call.cls}), "
            f"in {dtype}" + (f", whose range ends at {FP16_MAX:.0f}" if dtype == "float16" else "")
            + ". Everything after it is unusable. bfloat16 has float32's range at the same "
            "size; float32 always works.",
            _with_origin({"dtype": dtype, "non-finite values": call.nonfinite_out,
                          "largest input abs": biggest, "float16 max": FP16_MAX}, origin),
            tuple(fixes))]
    return []


def rule_silent_upcast(ev: Evidence) -> list[Finding]:
    half = ev.half_requested()
    if ev.failed or not half or ev.spec.autocast:
        return []
    # A cast asked for only inside map/preprocess and lost is map-cast-lost's story.
    s = ev.spec
    if half not in (s.model_dtype, s.model_cast, s.input_dtype, s.format_dtype):
        return []
    compute = ev.compute_dtypes()
    if not compute or compute.get("float32", 0) <= sum(compute.values()) / 2:
        return []
    upcast_at = next((c.name for c in ev.returned() if
                      any(t.dtype == half for t in c.inputs) and c.outputs and
                      all(o.dtype == "float32" for o in c.outputs if o.floating)), "model")
    return [Finding(
        "silent-upcast", "warning", upcast_at or "model",
        f"{half} was asked for, but the compute ran in float32: the model's weights are float32 "
        f"and it cast the {half} inputs up (or there were no floating inputs to cast). No speed "
        f"or memory gain. Load the model in {half}, or run under autocast.",
        _with_origin({"asked": half, "compute dtypes": compute},
                     _input_origin(ev, half) or _model_origin(ev, half)),
        (fix_model_dtype(half, ev), fix_autocast(half)))]


def rule_autocast_inactive(ev: Evidence) -> list[Finding]:
    dtype = ev.spec.autocast
    if not dtype:
        return []
    named = ev.spec.autocast_device
    if named and named != ev.device_type:  # known without the forward: said even when it failed
        return [Finding(
            "autocast-inactive", "warning", "model",
            f"autocast({named!r}, {dtype}) does nothing here: the model runs on {ev.device_type}, "
            f"and autocast only changes operations on the device type it names "
            "(torch.cuda.amp.autocast() is autocast('cuda')). Name the model's device type.",
            {"autocast device": named, "model device": ev.device_type, "autocast": dtype,
             "compute dtypes": ev.compute_dtypes()},
            (Fix(f"autocast-device-{ev.device_type}",
                 f"Autocast on {ev.device_type}, where the model runs",
                 {"autocast_device": ev.device_type},
                 f"torch.autocast({ev.device_type!r}, dtype=torch.{dtype})"),))]
    compute = ev.compute_dtypes()
    if ev.failed or not compute or compute.get(dtype, 0):
        return []
    alternative = "bfloat16" if dtype == "float16" else "float16"
    return [Finding(
        "autocast-inactive", "warning", "model",
        f"autocast({dtype}) is set but had no effect on {ev.device_type}: the compute ran in "
        f"{', '.join(compute)}. Autocast must use the device type the model runs on, and it is "
        "thread-local: enter it in the thread that runs the forward pass.",
        {"autocast": dtype, "device": ev.device_type, "compute dtypes": compute},
        (fix_autocast(alternative), fix_model_dtype(dtype, ev)))]


def rule_mixed_precision_params(ev: Evidence) -> list[Finding]:
    if len(ev.param_dtypes) < 2:
        return []
    majority = max(ev.param_dtypes, key=ev.param_dtypes.get)
    odd = [name for name, dtype in ev.module_param_dtypes.items()
           if dtype != majority and not ev.explained_fp32(name)]
    if not odd:
        return []
    return [Finding(
        "mixed-precision-params", "warning", odd[0],
        f"The parameters hold several floating dtypes ({', '.join(ev.param_dtypes)}), and "
        f"{len(odd)} module(s) such as {odd[0]} are not {majority} for no reason the model or "
        "keep_fp32 gives. Load the model with one explicit dtype.",
        _with_origin({"dtypes": dict(ev.param_dtypes), "modules": odd[:10]},
                     _model_origin(ev, majority)),
        (fix_model_dtype(majority, ev),))]


def rule_out_of_memory(ev: Evidence) -> list[Finding]:
    if not ev.failed or not is_oom(ev.exception):
        return []
    fixes = [Fix("halve-batch", f"Use batch size {max(1, ev.spec.batch_size // 2)}",
                 {"batch_size": max(1, ev.spec.batch_size // 2)}, "a smaller batch")]
    if ev.spec.model_dtype in ("float32", "auto"):
        fixes.insert(0, fix_model_dtype(_low_precision_for(ev), ev))
    return [Finding(
        "out-of-memory", "error", ev.error.get("module") or "model",
        f"The {ev.device_type} device ran out of memory during {ev.error['stage']}. Half "
        "precision halves the weights; a smaller batch shrinks the activations.",
        {"error": ev.message, "batch_size": ev.spec.batch_size}, tuple(fixes))]


# Headroom (overflow-risk): within a quarter of float16's range is near; below its smallest
# normal (2**-14) a whole tensor is subnormal in float16 (precision lost) or flushed to zero.
FP16_NEAR = FP16_MAX / 4
FP16_TINY = 2.0 ** -14


def rule_overflow_risk(ev: Evidence) -> list[Finding]:
    """In a run that is not float16, the first module whose output float16 could not hold."""
    if "float16" in ev.param_dtypes or ev.half_requested() == "float16":
        return []
    for call in ev.returned():
        # The primary output only: a tuple's extras can hold masks filled with the dtype's min.
        sizes = [t.absmax for t in call.outputs[:1] if t.absmax is not None and not t.nonfinite]
        big = max(sizes, default=0.0)
        tiny = min((s for s in sizes if s > 0), default=None)
        if big >= FP16_NEAR:
            story = (f"reach {big:.4g}" + (f", past float16's largest value {FP16_MAX:.0f}"
                                           if big > FP16_MAX else
                                           f", near float16's largest value {FP16_MAX:.0f}"))
        elif tiny is not None and tiny < FP16_TINY:
            story = (f"are all below {tiny:.3g} in magnitude, under float16's smallest normal "
                     f"value ({FP16_TINY:.3g}): they would lose their precision or flush to zero")
        else:
            continue
        return [Finding(
            "overflow-risk", "warning", call.name or "model",
            f"The outputs of {call.name or 'the model'} ({call.cls}) {story}. This run is fine, "
            "but the same pipeline in float16 would overflow or lose these values: keep this "
            "module in float32 there (run_in_float32), or use bfloat16.",
            {"largest abs": big, "smallest abs-max": tiny, "float16 max": FP16_MAX,
             "module class": call.cls}, ())]
    return []


def rule_label_dtype(ev: Evidence) -> list[Finding]:
    fact = ev.facts.get("labels")
    if not ev.spec.with_labels or fact is None:
        return []
    column = ev.spec.columns.get("label", "labels")
    if _strings(fact):
        return [Finding(
            "label-dtype", "error" if ev.failed else "warning", "labels",
            f"The labels ({column!r}) are strings, but the loss needs integer class ids: map each "
            "name to its id (model.config.label2id) in your preprocess, or run without labels.",
            {"stored": fact.stored, "after DataLoader": fact.loaded},
            (Fix("no-labels", "Run without labels (no loss)", {"with_labels": False},
                 "the label column is not passed to the model; no loss is computed"),))]
    if not (ev.failed and fact.final):
        return []
    if _MULTI_LABEL_ERRORS.search(ev.message) and not is_floating_name(fact.final):
        return [_label_cast(ev, fact, "float32", "but this model is a multi-label classifier "
                            "(problem_type multi_label_classification): its BCE loss takes float "
                            "targets, one 0.0/1.0 per class")]
    if not (_INTEGER_ERRORS.search(ev.message) and is_floating_name(fact.final)):
        return []
    why = (f"stored as {fact.stored} (class ids read as floats, from a CSV's 0.0/1.0)"
           if fact.stored and is_floating_name(fact.stored) else f"cast to {fact.final}")
    return [_label_cast(ev, fact, "int64", f"{why}: with floating labels a classifier picks "
                        "multi-label BCE (a target-size error), or cross-entropy refuses them")]


def _label_cast(ev: Evidence, fact: ColumnFacts, dtype: str, why: str) -> Finding:
    """label-dtype answered by casting the labels to `dtype` (int64 class ids, float32 targets)."""
    cast, what = {"int64": ("labels.long()", "class ids"), "float32": ("labels.float()", "multi-hot targets")}[dtype]
    return Finding(
        "label-dtype", "error", "labels",
        f"The labels reach the loss as {fact.final}, {why}. Cast them with {cast} before the loss.",
        {"stored": fact.stored, "fed": fact.final, "error": ev.message},
        (Fix(f"labels-{dtype}", f"Cast the labels to {dtype} ({what})", {"label_dtype": dtype},
             f"{cast} before the loss; the rest of the batch is unchanged"),))


def rule_input_device_unavailable(ev: Evidence) -> list[Finding]:
    name = ev.spec.input_device
    if name == "model" or resolve_device(ev.spec.replace(device=name)) is not None:
        return []
    return [Finding(
        "device-unavailable", "error", "input_device",
        f"The batch is moved to {name!r} (input_device), a device this machine does not have. "
        "Move the inputs to the model's device.",
        {"requested": name, "model device": ev.device_type},
        (Fix("inputs-to-model-device", "Move the inputs to the model's device",
             {"input_device": "model"}, "move every batch tensor to the model's (first) device"),))]


RULES = (rule_out_of_memory, rule_input_device_unavailable, rule_label_dtype,
         rule_device_mismatch, rule_list_batch, rule_integer_cast,
         rule_half_unsupported, rule_dtype_mismatch, rule_overflow, rule_map_cast_lost,
         rule_silent_upcast, rule_autocast_inactive, rule_mixed_precision_params,
         rule_half_on_cpu, rule_overflow_risk)


def device_unavailable(spec: PipelineSpec, available: list[str]) -> Finding:
    fixes = [Fix("device-auto", "Use the best device present (auto)", {"device": "auto"},
                 "the first CUDA device when present, else the CPU")]
    if spec.device_map:
        fixes[0] = Fix("device-auto", "Use the best device present, no device map",
                       {"device": "auto", "device_map": None}, "a single device")
    return Finding(
        "device-unavailable", "error", spec.device,
        f"The spec asks for device {spec.device!r}, which this machine does not have "
        f"(available: {', '.join(available)}).",
        {"requested": spec.device, "available": available}, tuple(fixes))


def run_rules(ev: Evidence) -> list[Finding]:
    findings = []
    for rule in RULES:
        findings.extend(rule(ev))
    return by_severity(findings)
