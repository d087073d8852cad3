"""Fixes as structured edits: each builder takes the facts (the dtype, the device, the user's
names and line) and returns the spec edit and the code edit that make the same change. No fix
is ever read back from its id.

The code is what a careful engineer writes today: `dtype=` at load, `torch.autocast(device_type,
dtype=...)`, only floating tensors cast. It goes by the user's own names (`Names`: the model, its
output, the batch, the loss, the optimizer and the GradScaler, read from the script's lines by
`names_at`), today's words (`model`, `outputs`, `inputs`, `loss`, `optimizer`, `scaler`) where
none is known: a spec's pipeline has no script.
"""

from __future__ import annotations

import ast
import dataclasses
import linecache
import re
from dataclasses import dataclass

from ..findings import CodeEdit, Fix


@dataclass(frozen=True)
class Batch:
    """The batch as the user's script names it at the model's call: a dict of tensors
    (`model(**inputs)`) or one tensor (`model(pixel_values)`)."""

    name: str = "inputs"
    is_dict: bool = True

    def each(self, expr: str, floating_only: bool = True) -> str:
        """The batch rebuilt with `expr` (of `v`) applied to each of its tensors."""
        if not self.is_dict:
            return f"{self.name} = {expr.replace('v.', self.name + '.')}"
        test = " if v.is_floating_point() else v" if floating_only else ""
        return f"{self.name} = {{k: {expr}{test} for k, v in {self.name}.items()}}"

    def labels(self) -> str:
        """The labels in the batch: its "labels" key, else a tensor of their own."""
        return f'{self.name}["labels"]' if self.is_dict else "labels"


BATCH = Batch()


@dataclass(frozen=True)
class Names:
    """The user's own names where fix code writes them. `call`: the model's call as the line
    writes it (`net(input_ids=ids, labels=y)`), None where unknown; `output`: the one name
    that call is assigned to, None where it is not."""

    model: str = "model"
    batch: Batch = BATCH
    call: str | None = None
    output: str | None = None
    loss: str = "loss"
    optimizer: str = "optimizer"
    scaler: str = "scaler"

    def called(self) -> str:
        """The model's call: the user's own, else built from the model and the batch."""
        if self.call:
            return self.call
        b = self.batch
        return f"{self.model}(**{b.name})" if b.is_dict else f"{self.model}({b.name})"

    def assigned(self) -> str:
        """The line that runs the model: `out = net(**enc)`."""
        return f"{self.output or 'outputs'} = {self.called()}"

    def device_type(self) -> str:
        """The model's device type as code: any nn.Module's (a plain one has no `.device`)."""
        return f"next({self.model}.parameters()).device.type"


NAMES = Names()


# -- the user's line ----------------------------------------------------------------------------

def source_line(source: dict | None) -> str | None:
    """The text of a script's line, `source` = {"file", "line"} (trace), None where unknown."""
    if not source or not source.get("file") or not source.get("line"):
        return None
    return linecache.getline(source["file"], source["line"]).strip() or None


def with_argument(line: str | None, name: str, argument: str) -> str | None:
    """`line` with `argument` added to its call of `name(...)` (a function, a class, a method),
    when the whole call is on the line; the user's comment after it dropped. An argument of
    the same keyword already there is replaced."""
    if not line:
        return None
    match = re.search(rf"(?<![\w]){re.escape(name)}\(", line)
    if match is None:
        return None
    keyword = argument.split("=", 1)[0] + "=" if "=" in argument else None
    depth, opened = 0, match.end() - 1
    for i in range(opened, len(line)):
        depth += {"(": 1, ")": -1}.get(line[i], 0)
        if depth == 0:
            inside = line[opened + 1:i].strip().rstrip(",")
            if keyword:
                inside = re.sub(rf"(^|,)\s*{re.escape(keyword)}[^,]*", "", inside).strip(", ")
            rest = line[i:].split("#")[0].rstrip()   # the user's comment after the call goes
            return f"{line[:opened + 1]}{inside + ', ' if inside else ''}{argument}{rest}"
    return None


def without_comment(line: str) -> str:
    """The user's line without the comment after its code."""
    return line.split("  #")[0].rstrip()


def replaced(line: str | None, pattern: str, replacement: str) -> str | None:
    """The user's line with `pattern` replaced once (their comment dropped), None if absent."""
    if not line:
        return None
    code = without_comment(line)
    new, count = re.subn(pattern, lambda _: replacement, code, count=1)
    return new if count else None


# -- the user's names ---------------------------------------------------------------------------

# Methods that run the forward pass of the model they are called on: `net.generate(ids)` is `net`.
_FORWARD_METHODS = ("forward", "generate")


def names_at(call: str | None, backward: str | None = None, step: str | None = None,
             scaler_step: bool = False, bound: tuple | None = None) -> Names:
    """The user's names, read from their lines: the model's call (`out = net(**enc)`: the model
    `net`, its output `out`, the batch `enc`; `loss = net(**enc).loss`: the loss), the training
    step's `loss.backward()` or `scaler.scale(loss).backward()`, and its `opt.step()` (or
    `scaler.step(opt)`, where `scaler_step` says a GradScaler stepped there or the backward
    line's scaler is the one stepping). `bound`: what the call's frame named the model, where
    the trace knows (`loss = crit(net(x), y)` is a call of `net`, not of `crit`; a model called
    inside a library's object, a pipeline's, keeps the word `model`). Today's words for whatever
    no line says."""
    names = _names_at_call(call, bound)
    found: dict = {}
    for node in _calls(backward):
        if isinstance(node.func, ast.Attribute) and node.func.attr == "backward":
            scaled = node.func.value
            if node.args:                                   # accelerator.backward(loss)
                found["loss"] = _name(node.args[0])
            elif (isinstance(scaled, ast.Call) and isinstance(scaled.func, ast.Attribute)
                  and scaled.func.attr == "scale" and scaled.args):
                found.update(loss=_name(scaled.args[0]), scaler=_name(scaled.func.value))
            else:
                found["loss"] = _name(scaled)
            break
    for node in _calls(step):
        if isinstance(node.func, ast.Attribute) and node.func.attr == "step":
            stepper = _name(node.func.value)
            if node.args and (scaler_step or stepper == found.get("scaler")):
                found.update(scaler=stepper, optimizer=_name(node.args[0]))
            elif not scaler_step:
                found["optimizer"] = stepper       # opt.step(), opt.step(closure)
            break
    return dataclasses.replace(names, **{k: v for k, v in found.items() if v})


def _names_at_call(line: str | None, bound: tuple | None) -> Names:
    """The model, its call, its output and the batch at the line that called the model: the
    call of a name `bound` to the model, else the first call that passes a name. The batch is
    the first name the call passes: `model(**batch)` a dict, `model(px)` and
    `model(pixel_values=px)` the tensor px."""
    text = (line or "").strip().rstrip(":")
    for candidate in (text, text.split("=", 1)[-1].strip()):
        try:
            tree = ast.parse(candidate)
        except SyntaxError:
            continue
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
        model = next((c for c in calls if bound and _callee(c) in bound), None)
        if model is not None:     # its batch: the first name passed in it (`net(norm(x))`: x)
            batch = next((b for c in ast.walk(model) if isinstance(c, ast.Call)
                          and (b := _batch_of(c)) is not None), BATCH)
            return _called(candidate, tree, model, batch)
        for node in calls:
            if (batch := _batch_of(node)) is not None:
                names = _called(candidate, tree, node, batch)
                # The trace knows what the frame calls the model, and it is not this callee.
                return dataclasses.replace(names, model=NAMES.model) \
                    if bound is not None else names
        return NAMES
    return NAMES


def _batch_of(call: ast.Call) -> Batch | None:
    for keyword in call.keywords:
        if keyword.arg is None and isinstance(keyword.value, ast.Name):
            return Batch(keyword.value.id, True)
    if call.args and isinstance(call.args[0], ast.Name):
        return Batch(call.args[0].id, False)
    named = [k.value.id for k in call.keywords if isinstance(k.value, ast.Name)]
    return Batch(named[0], False) if named else None


def _callee(call: ast.Call) -> str | None:
    """The model a call runs: `net` of `net(x)` and of `net.generate(x)`."""
    model = call.func
    if isinstance(model, ast.Attribute) and model.attr in _FORWARD_METHODS:
        model = model.value
    return _name(model)


def _called(text: str, tree: ast.Module, call: ast.Call, batch: Batch) -> Names:
    found = {"model": _callee(call), "call": ast.get_source_segment(text, call)}
    statement = tree.body[0] if len(tree.body) == 1 else None
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target, value = statement.targets[0], statement.value
    elif isinstance(statement, ast.AnnAssign):
        target, value = statement.target, statement.value
    else:
        target = value = None
    if value is call:
        found["output"] = _name(target)
    elif isinstance(value, ast.Attribute) and value.value is call and value.attr == "loss":
        found["loss"] = _name(target)
    return Names(batch=batch, **{k: v for k, v in found.items() if v})


def _calls(line: str | None) -> list:
    """The calls on a user's line, outermost first; none where it does not parse."""
    try:
        return [n for n in ast.walk(ast.parse((line or "").strip())) if isinstance(n, ast.Call)]
    except SyntaxError:
        return []


def _name(node) -> str | None:
    """What a fix may write to and read from as the user does: `net`, `self.model`,
    `models[0]`; None for any other expression (a call, a tuple)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, (ast.Attribute, ast.Subscript)) and _name(node.value) is not None:
        return ast.unparse(node)
    return None


def at_line(text: str, source: dict | None) -> CodeEdit:
    """Code that replaces the user's line where it is known, else code to add."""
    return CodeEdit(text, "replace" if source else "add", source)


def before_line(text: str, source: dict | None) -> CodeEdit:
    return CodeEdit(text, "insert" if source else "add", source)


# -- the batch ----------------------------------------------------------------------------------

def cast_inputs(spec, dtype: str, names: Names = NAMES, source: dict | None = None) -> Fix:
    edits = {"input_dtype": dtype, "input_cast": "floating"}
    if spec.map_dtype:
        edits["map_dtype"] = None
    return Fix(f"cast-inputs-{dtype}", f"Cast the floating inputs to {dtype}", edits,
               f"cast floating batch tensors to {dtype} right before the forward pass "
               "(ids and masks stay integer)",
               before_line(names.batch.each(f"v.to(torch.{dtype})")
                           + f"  # right before {names.model}(...)", source))


def drop_map_cast(dtype: str, source: dict | None = None) -> Fix:
    """The cast inside Dataset.map removed: Arrow storage undoes it, so it does nothing."""
    return Fix("drop-map-cast", f"Remove the cast to {dtype} from map (it has no effect)",
               {"map_dtype": None}, "no cast inside Dataset.map: Arrow stores the old dtype",
               CodeEdit(f"# in the function given to dataset.map: remove the .to(torch.{dtype}); "
                        "Arrow stores the old dtype", "insert" if source else "add", source))


def cast_floating_only(dtype: str, names: Names = NAMES, source: dict | None = None) -> Fix:
    return Fix("cast-floating-only", "Cast floating tensors only", {"input_cast": "floating"},
               "cast only floating batch tensors; ids, masks and labels stay integer",
               at_line(names.batch.each(f"v.to(torch.{dtype})")
                       + "  # ids and masks stay integer", source))


def format_without_dtype(spec, source: dict | None = None) -> Fix:
    edits = {"format_dtype": None, "input_dtype": spec.input_dtype or spec.format_dtype,
             "input_cast": "floating"}
    return Fix("format-without-dtype", "Drop dtype from with_format; cast floating inputs only",
               edits, "with_format('torch') without dtype: ids and labels stay integer; "
               "floating inputs cast before the forward pass",
               at_line('dataset = dataset.with_format("torch")  # no dtype=: ids and labels stay '
                       "integer; cast floating inputs before the model", source))


def format_torch(source: dict | None = None) -> Fix:
    return Fix("format-torch", "Return tensors: with_format('torch')", {"format": "torch"},
               "the dataset returns torch tensors (with_format('torch'))",
               at_line('dataset = dataset.with_format("torch")', source))


def inputs_to_model_device(names: Names = NAMES, source: dict | None = None) -> Fix:
    return Fix("inputs-to-model-device", "Move the inputs to the model's device",
               {"input_device": "model"}, "move every batch tensor to the model's (first) device",
               before_line(names.batch.each(f"v.to({names.model}.device)", floating_only=False),
                           source))


def drop_input_cast(spec) -> Fix | None:
    if not (spec.input_dtype or spec.format_dtype):
        return None
    return Fix("drop-input-cast", "Feed float32 inputs (no half precision)",
               {"input_dtype": None, "format_dtype": None}, "no cast of the inputs",
               CodeEdit("# remove the .half() / .to(torch.float16) of the inputs"))


def halve_batch(spec) -> Fix:
    size = max(1, spec.batch_size // 2)
    return Fix("halve-batch", f"Use batch size {size}", {"batch_size": size}, "a smaller batch",
               CodeEdit(f"batch_size = {size}"))


def labels_cast(dtype: str, names: Names = NAMES) -> Fix:
    cast, what = {"int64": ("labels.long()", "class ids"),
                  "float32": ("labels.float()", "multi-hot targets")}[dtype]
    labels = names.batch.labels()
    return Fix(f"labels-{dtype}", f"Cast the labels to {dtype} ({what})", {"label_dtype": dtype},
               f"{cast} before the loss; the rest of the batch is unchanged",
               CodeEdit(f"{labels} = {labels}.{cast.split('.', 1)[1]}  # before the loss"))


def no_labels(names: Names = NAMES) -> Fix:
    batch = names.batch
    code = (f'{batch.name}.pop("labels", None)  # no loss: the model gets no labels'
            if batch.is_dict else f"# call {names.model}(...) without labels=: no loss")
    return Fix("no-labels", "Run without labels (no loss)", {"with_labels": False},
               "the label column is not passed to the model; no loss is computed",
               CodeEdit(code))

def device_auto(spec=None) -> Fix:
    code = CodeEdit('device = torch.device("cuda" if torch.cuda.is_available() else "cpu")')
    if spec is not None and spec.device_map:
        return Fix("device-auto", "Use the best device present, no device map",
                   {"device": "auto", "device_map": None}, "a single device", code)
    return Fix("device-auto", "Use the best device present (auto)", {"device": "auto"},
               "the first CUDA device when present, else the CPU", code)


def device_at_creation(line: str | None, func: str, like: str, source: dict | None) -> Fix:
    """A tensor the user's code made on the default device: made where `like` lives."""
    code = with_argument(line, func, f"device={like}.device") or \
        f"tensor = torch.{func}(..., device={like}.device)  # made where {like} is"
    return Fix("device-at-creation", f"Make the tensor on {like}'s device",
               {}, f"device={like}.device where the tensor is made", at_line(code, source))


# -- the model's dtype --------------------------------------------------------------------------

def model_dtype(dtype: str, spec, source: dict | None = None, names: Names = NAMES) -> Fix:
    edits = {"model_dtype": dtype}
    if spec.model_cast and spec.model_cast != dtype:
        edits["model_cast"] = None  # a cast after loading would undo the load dtype
    if spec.input_dtype and spec.input_dtype != dtype:
        edits["input_dtype"] = dtype if dtype != "float32" else None
    if spec.autocast and dtype != "float32":
        edits["autocast"] = None
    verb = "Keep the model in float32" if dtype == "float32" else f"Load the model in {dtype}"
    code = with_argument(source_line(source), "from_pretrained", f"dtype=torch.{dtype}")
    model = names.model
    return Fix(f"model-{dtype}", verb, edits,
               f"load the model with from_pretrained(..., dtype=torch.{dtype})",
               at_line(code, source) if code else CodeEdit(
                   f"{model} = {model}.to(torch.{dtype})  # or load it so: "
                   f"from_pretrained(..., dtype=torch.{dtype})"))


def _autocast_code(device: str, dtype: str, names: Names, source: dict | None,
                   note: str = "", before: str = "") -> CodeEdit:
    """The user's autocast line rewritten where it is known; else the block to write."""
    line = f"with torch.autocast(device_type={device}, dtype=torch.{dtype}):{note}"
    if source:
        return at_line(line, source)
    return CodeEdit(f"{before}{line}\n    {names.assigned()}")


def autocast(dtype: str, names: Names = NAMES, device_type: str | None = None,
             source: dict | None = None) -> Fix:
    """float32 weights, the forward pass under autocast(dtype); on `device_type` where the rule
    knows it, else the model's own. At the user's own autocast line `source` (float32 weights
    already) only that line changes."""
    model = names.model
    where = f'"{device_type}"' if device_type else names.device_type()
    title = f"Keep float32 weights and run under autocast({dtype})"
    explain = f"float32 weights, forward pass under torch.autocast(device_type, dtype=torch.{dtype})"
    if source:
        return Fix(f"autocast-{dtype}", f"Run under autocast({dtype})", {"autocast": dtype},
                   explain, _autocast_code(where, dtype, names, source))
    return Fix(f"autocast-{dtype}", title,
               {"model_dtype": "float32", "model_cast": None, "input_dtype": None,
                "format_dtype": None, "map_dtype": None, "autocast": dtype}, explain,
               _autocast_code(where, dtype, names, None,
                              before=f"{model} = {model}.to(torch.float32)  # float32 weights: "
                                     "no .half() of the model or its inputs\n"))


def autocast_on_device(device_type: str, dtype: str, names: Names = NAMES,
                       source: dict | None = None) -> Fix:
    """The user's autocast, naming the device type the model runs on."""
    return Fix(f"autocast-device-{device_type}", f"Autocast on {device_type}, where the model runs",
               {"autocast_device": device_type},
               f"torch.autocast({device_type!r}, dtype=torch.{dtype})",
               _autocast_code(f'"{device_type}"', dtype, names, source))


def load_instead_of_cast(spec, keep_in_fp32, source: dict | None = None,
                         names: Names = NAMES) -> Fix:
    dtype = spec.model_cast
    code = with_argument(source_line(source), "from_pretrained", f"dtype=torch.{dtype}")
    return Fix(f"load-{dtype}-not-cast", f"Load in {dtype} with dtype= instead of model.half()",
               {"model_cast": None, "model_dtype": dtype},
               f"from_pretrained(..., dtype=torch.{dtype}) keeps the modules the library runs in "
               f"float32 ({', '.join(keep_in_fp32)}); model.half() casts them too",
               at_line(code, source) if code else CodeEdit(
                   f"{names.model} = AutoModel.from_pretrained(name, dtype=torch.{dtype})  "
                   "# instead of model.half(): the library's float32 modules stay float32"))


def float32_at_origin(spec, provenance: dict, names: Names = NAMES) -> Fix:
    """The model made float32 where its unasked half dtype came from: the user's own call with
    dtype=torch.float32, where known."""
    dtype, source = provenance["dtype"], provenance.get("source")
    line = source_line(source)
    model = names.model
    if provenance["from"] == "config":
        code = (with_argument(line, "from_config", "dtype=torch.float32")
                or f"{model} = AutoModel.from_config(config, dtype=torch.float32)")
        return Fix("from-config-float32", "Build the model in float32: "
                   "from_config(config, dtype=torch.float32)", {"model_dtype": "float32"},
                   f"the config says {dtype}; train from scratch in float32 weights",
                   at_line(f"{code}  # the config says {dtype}; train from scratch in float32 "
                           "weights", source))
    if provenance["from"] == "default-dtype":
        return Fix("default-dtype-float32", "Keep torch's default dtype float32",
                   {"model_dtype": "float32"},
                   f"torch's default, not {dtype}; ask for half precision with dtype= at load, "
                   "or autocast",
                   at_line(f"torch.set_default_dtype(torch.float32)  # torch's default, not "
                           f"{dtype}", source))
    code = (with_argument(line, "from_pretrained", "dtype=torch.float32")
            or f"{model} = AutoModel.from_pretrained(name, dtype=torch.float32)")
    return Fix("load-float32", "Load the model in float32: from_pretrained(..., dtype=torch.float32)",
               model_dtype("float32", spec).edits,
               f"the checkpoint is stored in {dtype}; train float32 weights",
               at_line(f"{code}  # the checkpoint is stored in {dtype}; train float32 weights",
                       source))


# -- training -----------------------------------------------------------------------------------

def train_edits(train, **fields) -> dict:
    """The edit of the spec's `train` (only the fields changed), when the run had one."""
    return {"train": fields} if train is not None else {}


def _scaled_step(names: Names) -> str:
    """The step with a GradScaler on the model's device type: GradScaler() alone means CUDA,
    and on a CPU it warns and turns itself off."""
    s = names.scaler
    return (f"{s} = torch.amp.GradScaler({names.device_type()})  # once, before the loop\n"
            f"{s}.scale({names.loss}).backward()\n{s}.step({names.optimizer})\n{s}.update()")


def _plain_step(names: Names) -> str:
    return f"{names.loss}.backward()\n{names.optimizer}.step()"


def master_weights(dtype: str, train=None, names: Names = NAMES) -> Fix:
    """float32 weights the optimizer updates, the forward pass in `dtype` under autocast (and a
    GradScaler for float16). The forward pass is the user's own line where its output has a
    name, their own loss line to follow it inside the block; else the model's own loss."""
    scaler = " and a GradScaler" if dtype == "float16" else ""
    train_fields = {"master_weights": True}
    if dtype == "float16":
        train_fields["grad_scaler"] = True
    model = names.model
    forward = (f"{names.assigned()}\n    # your line that computes {names.loss} from "
               f"{names.output}, here under autocast too"
               if names.output else f"{names.loss} = {names.called()}.loss")
    return Fix(f"master-weights-{dtype}", f"float32 master weights, autocast({dtype}){scaler}",
               {"model_dtype": "float32", "model_cast": None, "input_dtype": None,
                "autocast": dtype, **train_edits(train, **train_fields)},
               f"keep the weights in float32 for the optimizer and run the forward pass under "
               f"torch.autocast(device_type, dtype=torch.{dtype})"
               + ("; scale the loss with torch.amp.GradScaler so small gradients survive float16"
                  if dtype == "float16" else ""),
               CodeEdit(f"{model} = {model}.float()  # float32 master weights: the optimizer "
                        f"updates these\nwith torch.autocast(device_type={names.device_type()}, "
                        f"dtype=torch.{dtype}):\n    {forward}\n"
                        + (_scaled_step(names) if dtype == "float16" else _plain_step(names))))


def grad_scaler(train=None, names: Names = NAMES) -> Fix:
    code = _scaled_step(names)
    return Fix("grad-scaler", "Scale the loss with a GradScaler",
               train_edits(train, grad_scaler=True),
               "; ".join(line.split("  #")[0] for line in code.splitlines()), CodeEdit(code))


def unscale_before_clip(train=None, source: dict | None = None, names: Names = NAMES) -> Fix:
    unscale = f"{names.scaler}.unscale_({names.optimizer})"
    return Fix("unscale-before-clip", "Unscale the gradients before clipping them",
               train_edits(train, clip_before_unscale=False),
               f"{unscale} right before clip_grad_norm_: clipping acts on the true gradients, "
               "not on gradients scaled by the GradScaler",
               before_line(f"{unscale}  # before clip_grad_norm_: clip the true gradients",
                           source))


def drop_grad_scaler(train=None, names: Names = NAMES) -> Fix:
    code = _plain_step(names)
    return Fix("drop-grad-scaler", "Drop the GradScaler",
               train_edits(train, grad_scaler=False, clip_before_unscale=False),
               "; ".join(code.splitlines()) + " without a scaler under bfloat16",
               CodeEdit(f"{code}  # bfloat16 needs no GradScaler"))


def optimizer_eps(optimizer: str, train=None, names: Names = NAMES) -> Fix:
    """eps=1e-4 for the user's own optimizer class (`optimizer`: as code writes it)."""
    return Fix("optimizer-eps", "A larger eps the half dtype holds",
               train_edits(train, eps=1e-4),
               "eps=1e-4 in the optimizer's arguments (1e-8 is 0 in float16); the weights stay "
               "in half precision, and so do the risks of updating them",
               CodeEdit(f"{names.optimizer} = {optimizer}({names.model}.parameters(), "
                        "eps=1e-4)  # and your other arguments; 1e-8 is 0 in float16"))


def written(fix_id: str, title: str, code: str, source: dict | None,
            explain: str = "") -> Fix:
    """A fix of the user's own line with no spec edit (their tensor code, their settings):
    `code` is their line rewritten."""
    return Fix(fix_id, title, {}, explain or title, at_line(code, source))
