"""Fixes as structured edits: each builder takes the facts (the dtype, the device, the user's
names and line) and returns the spec edit and the code edit that make the same change. No fix
is ever read back from its id.

The code is what a careful engineer writes today: `dtype=` at load, `torch.autocast(device_type,
dtype=...)`, only floating tensors cast. The batch goes by the user's own name (`Batch`: the
variable the script passed to the model), `inputs` where none is known.
"""

from __future__ import annotations

import ast
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

    def call(self) -> str:
        return f"model(**{self.name})" if self.is_dict else f"model({self.name})"

    def each(self, expr: str, floating_only: bool = True) -> str:
        """The batch rebuilt with `expr` (of `v`) applied to each of its tensors."""
        if not self.is_dict:
            return f"{self.name} = {expr.replace('v.', self.name + '.')}"
        test = " if v.is_floating_point() else v" if floating_only else ""
        return f"{self.name} = {{k: {expr}{test} for k, v in {self.name}.items()}}"


BATCH = Batch()


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


def batch_of(line: str | None) -> Batch:
    """The batch a model call's line passes: `model(**batch)` -> a dict called batch;
    `model(pixel_values=px)` and `model(px)` -> the tensor px; else BATCH."""
    if not line:
        return BATCH
    text = line.strip().rstrip(":")
    for candidate in (text, text.split("=", 1)[-1].strip()):
        try:
            tree = ast.parse(candidate)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                for keyword in node.keywords:
                    if keyword.arg is None and isinstance(keyword.value, ast.Name):
                        return Batch(keyword.value.id, True)
                if node.args and isinstance(node.args[0], ast.Name):
                    return Batch(node.args[0].id, False)
                named = [k.value.id for k in node.keywords if isinstance(k.value, ast.Name)]
                if named:
                    return Batch(named[0], False)
        return BATCH
    return BATCH


def at_line(text: str, source: dict | None) -> CodeEdit:
    """Code that replaces the user's line where it is known, else code to add."""
    return CodeEdit(text, "replace" if source else "add", source)


def before_line(text: str, source: dict | None) -> CodeEdit:
    return CodeEdit(text, "insert" if source else "add", source)


# -- the batch ----------------------------------------------------------------------------------

def cast_inputs(spec, dtype: str, batch: Batch = BATCH, source: dict | None = None) -> Fix:
    edits = {"input_dtype": dtype, "input_cast": "floating"}
    if spec.map_dtype:
        edits["map_dtype"] = None
    return Fix(f"cast-inputs-{dtype}", f"Cast the floating inputs to {dtype}", edits,
               f"cast floating batch tensors to {dtype} right before the forward pass "
               "(ids and masks stay integer)",
               before_line(batch.each(f"v.to(torch.{dtype})")
                           + "  # right before model(...)", source))


def drop_map_cast(dtype: str, source: dict | None = None) -> Fix:
    """The cast inside Dataset.map removed: Arrow storage undoes it, so it does nothing."""
    return Fix("drop-map-cast", f"Remove the cast to {dtype} from map (it has no effect)",
               {"map_dtype": None}, "no cast inside Dataset.map: Arrow stores the old dtype",
               CodeEdit(f"# in the function given to dataset.map: remove the .to(torch.{dtype}); "
                        "Arrow stores the old dtype", "insert" if source else "add", source))


def cast_floating_only(dtype: str, batch: Batch = BATCH, source: dict | None = None) -> Fix:
    return Fix("cast-floating-only", "Cast floating tensors only", {"input_cast": "floating"},
               "cast only floating batch tensors; ids, masks and labels stay integer",
               at_line(batch.each(f"v.to(torch.{dtype})")
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


def inputs_to_model_device(batch: Batch = BATCH, source: dict | None = None) -> Fix:
    return Fix("inputs-to-model-device", "Move the inputs to the model's device",
               {"input_device": "model"}, "move every batch tensor to the model's (first) device",
               before_line(batch.each("v.to(model.device)", floating_only=False), source))


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


def labels_cast(dtype: str) -> Fix:
    cast, what = {"int64": ("labels.long()", "class ids"),
                  "float32": ("labels.float()", "multi-hot targets")}[dtype]
    return Fix(f"labels-{dtype}", f"Cast the labels to {dtype} ({what})", {"label_dtype": dtype},
               f"{cast} before the loss; the rest of the batch is unchanged",
               CodeEdit(f'inputs["labels"] = inputs["labels"].{cast.split(".", 1)[1]}  '
                        "# before the loss"))


def no_labels() -> Fix:
    return Fix("no-labels", "Run without labels (no loss)", {"with_labels": False},
               "the label column is not passed to the model; no loss is computed",
               CodeEdit('inputs.pop("labels", None)  # no loss: the model gets no labels'))


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

def model_dtype(dtype: str, spec, source: dict | None = None) -> Fix:
    edits = {"model_dtype": dtype}
    if spec.model_cast and spec.model_cast != dtype:
        edits["model_cast"] = None  # a cast after loading would undo the load dtype
    if spec.input_dtype and spec.input_dtype != dtype:
        edits["input_dtype"] = dtype if dtype != "float32" else None
    if spec.autocast and dtype != "float32":
        edits["autocast"] = None
    verb = "Keep the model in float32" if dtype == "float32" else f"Load the model in {dtype}"
    code = with_argument(source_line(source), "from_pretrained", f"dtype=torch.{dtype}")
    return Fix(f"model-{dtype}", verb, edits,
               f"load the model with from_pretrained(..., dtype=torch.{dtype})",
               at_line(code, source) if code else CodeEdit(
                   f"model = model.to(torch.{dtype})  # or load it so: "
                   f"from_pretrained(..., dtype=torch.{dtype})"))


def _autocast_code(device: str, dtype: str, batch: Batch, source: dict | None,
                   note: str = "", before: str = "") -> CodeEdit:
    """The user's autocast line rewritten where it is known; else the block to write."""
    line = f"with torch.autocast(device_type={device}, dtype=torch.{dtype}):{note}"
    if source:
        return at_line(line, source)
    return CodeEdit(f"{before}{line}\n    outputs = {batch.call()}")


def autocast(dtype: str, batch: Batch = BATCH, device_type: str | None = None,
             source: dict | None = None) -> Fix:
    """float32 weights, the forward pass under autocast(dtype); on `device_type` where the rule
    knows it, else the model's own. At the user's own autocast line `source` (float32 weights
    already) only that line changes."""
    where = f'"{device_type}"' if device_type else "model.device.type"
    title = f"Keep float32 weights and run under autocast({dtype})"
    explain = f"float32 weights, forward pass under torch.autocast(device_type, dtype=torch.{dtype})"
    if source:
        return Fix(f"autocast-{dtype}", f"Run under autocast({dtype})", {"autocast": dtype},
                   explain, _autocast_code(where, dtype, batch, source))
    return Fix(f"autocast-{dtype}", title,
               {"model_dtype": "float32", "model_cast": None, "input_dtype": None,
                "format_dtype": None, "map_dtype": None, "autocast": dtype}, explain,
               _autocast_code(where, dtype, batch, None,
                              before="model = model.to(torch.float32)  # float32 weights: no "
                                     ".half() of the model or its inputs\n"))


def autocast_on_device(device_type: str, dtype: str, batch: Batch = BATCH,
                       source: dict | None = None) -> Fix:
    """The user's autocast, naming the device type the model runs on."""
    return Fix(f"autocast-device-{device_type}", f"Autocast on {device_type}, where the model runs",
               {"autocast_device": device_type},
               f"torch.autocast({device_type!r}, dtype=torch.{dtype})",
               _autocast_code(f'"{device_type}"', dtype, batch, source))


def load_instead_of_cast(spec, keep_in_fp32, source: dict | None = None) -> Fix:
    dtype = spec.model_cast
    code = with_argument(source_line(source), "from_pretrained", f"dtype=torch.{dtype}")
    return Fix(f"load-{dtype}-not-cast", f"Load in {dtype} with dtype= instead of model.half()",
               {"model_cast": None, "model_dtype": dtype},
               f"from_pretrained(..., dtype=torch.{dtype}) keeps the modules the library runs in "
               f"float32 ({', '.join(keep_in_fp32)}); model.half() casts them too",
               at_line(code, source) if code else CodeEdit(
                   f"model = AutoModel.from_pretrained(name, dtype=torch.{dtype})  "
                   "# instead of model.half(): the library's float32 modules stay float32"))


def float32_at_origin(spec, provenance: dict) -> Fix:
    """The model made float32 where its unasked half dtype came from: the user's own call with
    dtype=torch.float32, where known."""
    dtype, source = provenance["dtype"], provenance.get("source")
    line = source_line(source)
    if provenance["from"] == "config":
        code = (with_argument(line, "from_config", "dtype=torch.float32")
                or "model = AutoModel.from_config(config, dtype=torch.float32)")
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
            or "model = AutoModel.from_pretrained(name, dtype=torch.float32)")
    return Fix("load-float32", "Load the model in float32: from_pretrained(..., dtype=torch.float32)",
               model_dtype("float32", spec).edits,
               f"the checkpoint is stored in {dtype}; train float32 weights",
               at_line(f"{code}  # the checkpoint is stored in {dtype}; train float32 weights",
                       source))


# -- training -----------------------------------------------------------------------------------

# The scaler on the model's device type: GradScaler() alone means CUDA, and on a CPU it warns and
# turns itself off.
_SCALED_STEP = ("scaler = torch.amp.GradScaler(model.device.type)  # once, before the loop\n"
                "scaler.scale(loss).backward()\nscaler.step(optimizer)\nscaler.update()")


def train_edits(train, **fields) -> dict:
    """The edit of the spec's `train` (only the fields changed), when the run had one."""
    return {"train": fields} if train is not None else {}


def master_weights(dtype: str, train=None, batch: Batch = BATCH) -> Fix:
    """float32 weights the optimizer updates, the forward pass in `dtype` under autocast (and a
    GradScaler for float16)."""
    scaler = " and a GradScaler" if dtype == "float16" else ""
    train_fields = {"master_weights": True}
    if dtype == "float16":
        train_fields["grad_scaler"] = True
    return Fix(f"master-weights-{dtype}", f"float32 master weights, autocast({dtype}){scaler}",
               {"model_dtype": "float32", "model_cast": None, "input_dtype": None,
                "autocast": dtype, **train_edits(train, **train_fields)},
               f"keep the weights in float32 for the optimizer and run the forward pass under "
               f"torch.autocast(device_type, dtype=torch.{dtype})"
               + ("; scale the loss with torch.amp.GradScaler so small gradients survive float16"
                  if dtype == "float16" else ""),
               CodeEdit(f"model = model.float()  # float32 master weights: the optimizer updates "
                        f"these\nwith torch.autocast(device_type=model.device.type, "
                        f"dtype=torch.{dtype}):\n    loss = {batch.call()}.loss\n"
                        + (_SCALED_STEP if dtype == "float16"
                           else "loss.backward()\noptimizer.step()")))


def grad_scaler(train=None) -> Fix:
    return Fix("grad-scaler", "Scale the loss with a GradScaler",
               train_edits(train, grad_scaler=True),
               "scaler = torch.amp.GradScaler(model.device.type); scaler.scale(loss).backward(); "
               "scaler.step(optimizer); scaler.update()",
               CodeEdit(_SCALED_STEP))


def unscale_before_clip(train=None, source: dict | None = None) -> Fix:
    return Fix("unscale-before-clip", "Unscale the gradients before clipping them",
               train_edits(train, clip_before_unscale=False),
               "scaler.unscale_(optimizer) right before clip_grad_norm_: clipping acts on the "
               "true gradients, not on gradients scaled by the GradScaler",
               before_line("scaler.unscale_(optimizer)  # before clip_grad_norm_: clip the true "
                           "gradients", source))


def drop_grad_scaler(train=None) -> Fix:
    return Fix("drop-grad-scaler", "Drop the GradScaler",
               train_edits(train, grad_scaler=False, clip_before_unscale=False),
               "loss.backward(); optimizer.step() without a scaler under bfloat16",
               CodeEdit("loss.backward()\noptimizer.step()  # bfloat16 needs no GradScaler"))


def optimizer_eps(train=None) -> Fix:
    return Fix("optimizer-eps", "A larger eps the half dtype holds",
               train_edits(train, eps=1e-4),
               "eps=1e-4 in the optimizer's arguments (1e-8 is 0 in float16); the weights stay "
               "in half precision, and so do the risks of updating them",
               CodeEdit("optimizer = torch.optim.AdamW(model.parameters(), eps=1e-4)  "
                        "# 1e-8 is 0 in float16"))


def written(fix_id: str, title: str, code: str, source: dict | None,
            explain: str = "") -> Fix:
    """A fix of the user's own line with no spec edit (their tensor code, their settings):
    `code` is their line rewritten."""
    return Fix(fix_id, title, {}, explain or title, at_line(code, source))
