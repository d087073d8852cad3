"""Export a pipeline spec as a standalone Python script.

The script reproduces the pipeline exactly as the spec describes it (mistakes included, so the
user sees in plain code what the app ran) with every applied fix in place and named in a comment.
It is written the way a careful engineer writes it today: `dtype=` (never `torch_dtype=`),
`torch.autocast(device_type, dtype=...)`, `with_format("torch")`, floating-only casts,
`torch.inference_mode()`; a spec with `train` also gets its training step, in the order a
correct mixed-precision loop runs it (or the user's own wrong order, commented as such).

What the script does is decided below this layer, by `core/run/export_plan.py` (the choices the
spec leaves open resolved the way the pipeline resolves them); this module only writes that
plan's text, its choices as literals.

The text is assembled from one small function per section, each reading the plan.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from ... import __version__
from ..common.files import write_text_atomic
from ..common.island_code import ISLAND_HELPERS
from ..common.library_logs import CHATTY
from ..run.export_plan import ExportPlan, Fp8Conversion, export_plan
from ..spec.value import PipelineSpec


# In every script's docstring: how the command line knows a file it may replace is a script.
SIGNATURE = "as its fp16studio spec describes it"


def export_script(spec: PipelineSpec, path: str | Path | None = None) -> str:
    """The script's text; also written (atomically) to `path` when given."""
    return _checked(render(export_plan(spec)), path)


def _checked(text: str, path: str | Path | None) -> str:
    compile(text, "<exported script>", "exec")  # a syntax error here is our bug, never the user's
    if path is not None:
        write_text_atomic(Path(path), text)
    return text


def export_fp8_script(spec: PipelineSpec, plan, path: str | Path | None = None) -> str:
    """The script of the pipeline in bfloat16 (as its FP8 plan ran it) with exactly the plan's
    layers converted by torchao's `convert_to_float8_training` (`plan`: an fp8 Fp8Plan)."""
    from ..precision.fp8 import plan_spec

    layers = Fp8Conversion(plan.recipe, tuple(plan.converted), tuple(plan.keep_bf16),
                           training=False)
    return _checked(render(export_plan(plan_spec(spec), fp8=layers)), path)


def render(plan: ExportPlan) -> str:
    head = [_docstring(plan), _fix_list(plan), _imports(plan), _constants(plan)]
    functions = [_pick_device(), _run_in_float32(plan), _load_model(plan),
                 _load_preprocess(plan), _read_rows(plan), _build_batch(plan), _main_output(),
                 _train(plan), _main(plan)]
    # PEP 8 spacing: one blank line in the header, two around top-level functions.
    return ("\n\n".join(part.strip("\n") for part in head if part) + "\n\n\n"
            + "\n\n\n".join(part.strip("\n") for part in functions if part) + "\n")


# -- sections ------------------------------------------------------------------------------------
def _docstring(plan: ExportPlan) -> str:
    s = plan.spec
    precision = f"{s.model_dtype} weights" + (f" cast to {s.model_cast}" if s.model_cast else "")
    if s.autocast:
        precision += f", autocast to {s.autocast}"
    if plan.islands:
        precision += f", {len(plan.islands)} float32 island pattern(s)"
    fp8 = (f"{len(plan.fp8.converted)} Linear layer(s) in FP8 (torchao float8, "
           f"{plan.fp8.recipe})" if plan.fp8 else "")
    if fp8 and not plan.fp8.training:
        precision += f", {fp8}"
    what = "One forward pass"
    prints = ("Prints a summary of the output, then the same as one JSON\nline; --save-output "
              "also saves the output tensor (torch.save).")
    if plan.train:
        what += f" and {plan.train.steps} training step(s)"
        if fp8 and plan.fp8.training:
            what += f" with {fp8}"
        prints = ("Prints a summary of the output, then the same as one JSON\nline; then the "
                  'loss of each training step, and {"steps": [...]} as one JSON line.\n'
                  "--save-output also saves the output tensor (torch.save).")
    return f'''
"""{what} of a Hugging Face pipeline, {SIGNATURE}.

Model: {plan.model_class} ({precision}); {s.samples} rows, batches of {s.batch_size}.
Exported by fp16studio {__version__}. {prints}
"""'''


def _fix_list(plan: ExportPlan) -> str:
    if not plan.fixes:
        return ""
    lines = ["# Fixes applied in fp16studio, oldest first:"]
    for i, fix in enumerate(plan.fixes, 1):
        lines.append(f"#   {i}. {_comment_text(fix.title)} [{_comment_text(fix.id)}]")
        if fix.explain:
            lines.append(f"#      {_comment_text(fix.explain)}")
    return "\n".join(lines)


def _imports(plan: ExportPlan) -> str:
    s = plan.spec
    stdlib = {"argparse", "inspect", "json"} | ({"dataclasses"} if plan.fp8 else set())
    if plan.train:
        stdlib.add("math")
    if plan.preprocess:
        stdlib |= {"importlib.util", "sys"}
    if s.keep_fp32:
        stdlib.add("fnmatch")
    if plan.islands:
        stdlib |= {"fnmatch", "re"}
    third = {"torch": None}
    names: dict[str, set] = {"torch.utils.data": {"DataLoader"},
                             "transformers": {plan.model_class, plan.processor_class} - {None}}
    if plan.audio and plan.audio.undecode:
        names.setdefault("datasets", set()).add("Audio")
    if plan.fp8:
        names["torchao.float8"] = {"Float8LinearConfig", "convert_to_float8_training"}
    for module, name in _READ_IMPORTS[plan.rows.kind] + _synthetic_imports(plan):
        if name is None:
            third[module] = None
        else:
            names.setdefault(module, set()).add(name)
    lines = [f"import {module}" for module in sorted(stdlib | {"logging"})] + [""]
    # Before torch is imported: its logging set-up keeps a level set by then.
    lines += ["# The libraries' own chatter (torchao's kernels that do not load here, torch's pytree",
              "# deprecations): only their errors reach stderr, so what prints is this script's.",
              f"for chatty in {_q(list(CHATTY))}:",
              "    logging.getLogger(chatty).setLevel(logging.ERROR)", ""]
    lines += [f"import {module} as np" if module == "numpy" else f"import {module}"
              for module in sorted(third)]
    lines += [f"from {module} import {', '.join(sorted(names[module]))}" for module in sorted(names)]
    return "\n".join(lines)


def _constants(plan: ExportPlan) -> str:
    s = plan.spec
    lines = [f"MODEL = {_q(plan.model_ref)}"]
    if s.revision:
        lines.append(f"REVISION = {_q(s.revision)}")
    if plan.rows.ref is not None:
        lines.append(f"DATASET = {_q(plan.rows.ref)}")
    lines += [f"SAMPLES = {s.samples}", f"BATCH_SIZE = {s.batch_size}"]
    if plan.train:
        lines.append(f"TRAIN_STEPS = {plan.train.steps}")
    if s.keep_fp32:
        lines.append(f"KEEP_FP32 = {_q(list(s.keep_fp32))}  # module-name patterns (fnmatch)")
    if plan.islands:
        lines.append(f"RUN_IN_FLOAT32 = {_q(list(plan.islands))}  # module-name patterns "
                     "(fnmatch)")
    if plan.fp8:
        lines += _fp8_constants(plan.fp8)
    return "\n".join(lines)


def _fp8_constants(fp8: Fp8Conversion) -> list[str]:
    if fp8.training:
        head = [f"# FP8 training (the spec's train.fp8, recipe {fp8.recipe}): these Linear "
                "layers go to FP8 for the",
                "# training steps; the rest stay as loaded (shapes FP8 refuses, or KEEP_BF16).",
                f"FP8_LAYERS = {_q(list(fp8.converted))}",
                f"KEEP_BF16 = {_q(list(fp8.keep_bf16))}  # train.fp8_keep"]
    else:
        head = [f"# The FP8 plan (fp16studio fp8, recipe {fp8.recipe}): these Linear layers "
                "go to FP8; the rest stay",
                "# bfloat16 (shapes FP8 refuses, too small to gain, or sensitive: KEEP_BF16).",
                f"FP8_LAYERS = {_q(list(fp8.converted))}",
                f"KEEP_BF16 = {_q(list(fp8.keep_bf16))}  # FP8 SQNR under the threshold on the "
                "plan's batch"]
    return head + [f"FP8_RECIPE = {_q(fp8.recipe)}",
                   f"FP8_CAPABILITY = {fp8.capability}  # the recipe's compute "
                   "capability; below it, emulated"]


def _fp8_conversion() -> list[str]:
    return ["# FP8: torchao converts exactly the FP8_LAYERS; where the GPU has no FP8 "
            "(or on a CPU)",
            "# torchao emulates it: the same numerics, no speed. FP8 is faster only compiled.",
            'native = device.type == "cuda" and torch.cuda.get_device_capability(device) >= '
            "FP8_CAPABILITY",
            "config = Float8LinearConfig.from_recipe_name(FP8_RECIPE)",
            "# pad_inner_dim: the weights' gradients multiply over the batch's tokens, which "
            "the GPU's",
            "# FP8 matmul takes only in multiples of 16.",
            "config = dataclasses.replace(config, emulate=not native, pad_inner_dim=True)",
            "convert_to_float8_training(model, config=config,",
            "                           module_filter_fn=lambda module, fqn: fqn in FP8_LAYERS)",
            'converted = [name for name, m in model.named_modules() if type(m).__name__ == '
            '"Float8Linear"]',
            'print(json.dumps({"fp8_converted": converted}))',
            "if native:",
            "    model = torch.compile(model)"]


def _pick_device() -> str:
    return '''
def pick_device(name):
    """'auto' is the first CUDA device when there is one, else the CPU."""
    if name == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    return torch.device(name)'''


def _run_in_float32(plan: ExportPlan) -> str:
    return "\n" + ISLAND_HELPERS if plan.islands else ""


def _load_model(plan: ExportPlan) -> str:
    s = plan.spec
    load = plan.load_dtype
    args = ["MODEL", "dtype=" + ('"auto"' if load == "auto" else _torch_dtype(load))]
    args += _hub_args(s)
    body = _fix_notes(plan, ("model_dtype", "device_map", "device"))
    if load != s.model_dtype:
        body += ["# Loaded in float32 so the float32 islands keep the checkpoint's own weights;",
                 f"# the rest is cast to {s.model_dtype} below."]
    if s.device_map:
        args.append(f"device_map={_q(s.device_map)}")
        body.append("# device_map places the model (accelerate), so --device is not used here.")
    body.append(f"model = {plan.model_class}.from_pretrained({', '.join(args)})")
    if not s.device_map:
        body.append("model.to(device)")
    if plan.cast_after_load:
        body += _fix_notes(plan, ("model_cast",))
        body += [f"# The whole model cast after loading (model_cast: {plan.cast_after_load}): "
                 "every floating parameter and buffer,",
                 "# the library's own float32 modules included.", _model_cast(plan.cast_after_load)]
    if plan.islands:
        body += _fix_notes(plan, ("run_in_float32",))
        half = plan.island_dtype
        dtype = _torch_dtype(half) if half != "auto" else "model.dtype"
        library = ", library_float32=False" if s.model_cast else ""
        body.append(f"run_in_float32(model, {dtype}, RUN_IN_FLOAT32{library})")
    if s.keep_fp32:
        body += _fix_notes(plan, ("keep_fp32",))
        body += ["# Modules kept in float32 whatever the model's dtype.",
                 "for name, module in model.named_modules():",
                 "    if name and any(fnmatch.fnmatchcase(name, p) for p in KEEP_FP32):",
                 "        module.float()"]
    if plan.fp8 and not plan.fp8.training:
        body += _fp8_conversion()
    body += ["model.eval()", "return model"]
    return "def load_model(device):\n" + _indent(body)


def _model_cast(dtype: str) -> str:
    short = {"float16": "half", "float32": "float"}.get(dtype)
    return f"model.{short}()" if short else f"model.to({_torch_dtype(dtype)})"


def _load_preprocess(plan: ExportPlan) -> str:
    if not plan.preprocess:
        return ""
    file, function = plan.preprocess
    return f'''
def load_preprocess():
    """The user's example-level function, imported from its file."""
    module_spec = importlib.util.spec_from_file_location({_q(Path(file).stem)}, {_q(file)})
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_spec.name] = module  # datasets pickles the function to fingerprint the map
    module_spec.loader.exec_module(module)
    return module.{function}'''


def _read_rows(plan: ExportPlan) -> str:
    parts = []
    if plan.synthetic:
        parts.append(_synthetic_rows(plan))
    # The app's own audio helpers, verbatim: the script reads and decodes audio as the app does.
    if plan.rows.folder_reader:
        parts.append(plan.rows.folder_reader)
        parts.append(f"AUDIO_SUFFIXES = {list(plan.rows.audio_suffixes)!r}")
    if plan.audio:
        parts.append(plan.audio.decoder)
    parts.append(f'''
def read_rows():
    """The first SAMPLES rows of the split."""
    ds = {_read_expression(plan.rows)}
    return ds.select(range(min(SAMPLES, len(ds))))''')
    return "\n\n\n".join(part.strip("\n") for part in parts)


def _read_expression(rows) -> str:
    """The expression that reads the split's rows."""
    split = _q(rows.split)
    return {
        "by-name": f"load_dataset(DATASET, {_q(rows.config)}, split={split})",
        "file": f"load_dataset({_q(rows.builder)}, data_files={{{split}: DATASET}}, split={split})",
        "folder": f"load_dataset({_q(rows.builder)}, data_dir=DATASET, split={split})",
        "saved-dict": f"load_from_disk(DATASET)[{split}]",
        "saved": "load_from_disk(DATASET)",
        "audio-folder": "folder_rows(Path(DATASET))",
        "synthetic": "synthetic_rows()",
    }[rows.kind]


# (module, name) pairs each way of reading the rows needs (name None: `import module`).
_READ_IMPORTS = {
    "by-name": (("datasets", "load_dataset"),), "file": (("datasets", "load_dataset"),),
    "folder": (("datasets", "load_dataset"),), "saved-dict": (("datasets", "load_from_disk"),),
    "saved": (("datasets", "load_from_disk"),), "audio-folder": (("pathlib", "Path"),),
    "synthetic": (("datasets", "Dataset"),),
}


def _synthetic_imports(plan: ExportPlan) -> tuple:
    if plan.synthetic and plan.synthetic.kind == "image":
        return (("datasets", "Image"), ("numpy", None), ("PIL", "Image as PILImage"))
    return ()


def _synthetic_rows(plan: ExportPlan) -> str:
    facts = plan.synthetic
    labels = f"[i % {facts.num_labels} for i in range(SAMPLES)]"
    if facts.kind == "text":
        texts = "\n".join(f"    {_q(text)}," for text in facts.texts)
        return f'''
TEXTS = [
{texts}
]


def synthetic_rows():
    """Rows made up for a model with no dataset at hand (the spec's dataset: synthetic)."""
    texts = [TEXTS[i % len(TEXTS)] for i in range(SAMPLES)]
    return Dataset.from_dict({{"text": texts, "label": {labels}}})'''
    side = facts.side
    return f'''
def synthetic_rows():
    """Random images made up for a model with no dataset at hand (dataset: synthetic)."""
    rng = np.random.default_rng(0)
    images = [PILImage.fromarray(rng.integers(0, 256, ({side}, {side}, 3), dtype=np.uint8))
              for _ in range(SAMPLES)]
    ds = Dataset.from_dict({{"image": images, "label": {labels}}})
    return ds.cast_column("image", Image())'''


def _build_batch(plan: ExportPlan) -> str:
    s = plan.spec
    body = ["ds = read_rows()"]
    if plan.audio and plan.audio.undecode:
        body.append("# datasets decodes Audio with torchcodec (needs FFmpeg): keep the files, "
                    "decode with soundfile.")
        body += [f"ds = ds.cast_column({_q(c)}, Audio(decode=False))" for c in plan.audio.undecode]
    if plan.preprocess:
        body += _fix_notes(plan, ("preprocess",))
        body.append("ds = ds.map(load_preprocess())")
    if plan.processor_class and plan.preprocess:
        body += [f"# The model's input, unless the function above made {_q(plan.main_input)} "
                 "itself."]
        body += ["if " + _q(plan.main_input) + " not in ds.column_names:"] + [
            "    " + line if line else line for line in _process(plan)]
    elif plan.processor_class:
        body += _process(plan)
    body += _labels(plan)
    body += _fix_notes(plan, ("format", "format_dtype"))
    body += _format(s)
    body += ["loader = DataLoader(ds, batch_size=BATCH_SIZE, shuffle=False)",
             "batch = dict(next(iter(loader)))"]
    body += _fix_notes(plan, ("input_dtype", "input_cast", "input_device", "label_dtype"))
    body += _cast_and_move(s)
    if plan.decoder_start is not None:
        body += ["# An encoder-decoder model: the decoder starts from its start token.",
                 f'if {_q(plan.main_input)} in batch and not {{"labels", "decoder_input_ids"}} & set(batch):',
                 f'    ids = batch[{_q(plan.main_input)}]',
                 f'    batch["decoder_input_ids"] = torch.full((ids.shape[0], 1), {plan.decoder_start}, '
                 "dtype=torch.long, device=ids.device)"]
    body.append("return batch")
    signature = "model, processor" if plan.processor_class else "model"
    return (f"def build_batch({signature}):\n"
            '    """The batch the model receives, built step by step as the pipeline does."""\n'
            + _indent(body))


_NO_INPUT = ("the preprocess function did not make {main_input!r}, and the dataset has no column the "
             "processor takes: make {main_input!r} in the function")
_NO_LABELS = "with_labels: neither the dataset nor the preprocess function made a label column"


def _process(plan: ExportPlan) -> list[str]:
    s, columns = plan.spec, plan.columns
    if plan.processor_input == "text-and-image":
        inner = [f'images = [image.convert("RGB") for image in rows[{_q(columns.image)}]]',
                 "# The processor gets the texts and the images at once, as users call it.",
                 f"out = processor(text=rows[{_q(columns.text)}], images=images, padding=True, "
                 'truncation=True, return_tensors="pt")']
    elif plan.processor_input == "audio":
        a = plan.audio
        kwargs = "".join(f", {k}={v!r}" for k, v in a.kwargs.items())
        inner = [f"arrays = [decode(value, {a.rate}) for value in rows[{_q(a.column)}]]",
                 f'out = processor(arrays, sampling_rate={a.rate}, return_tensors="pt"{kwargs})']
    elif plan.processor_input == "image":
        inner = [f'images = [image.convert("RGB") for image in rows[{_q(columns.image)}]]',
                 'out = processor(images=images, return_tensors="pt")']
    elif plan.processor_input == "text":
        texts = ", ".join(f"rows[{_q(column)}]" for column in (columns.text, columns.text_pair)
                          if column)
        inner = [f'out = processor({texts}, padding=True, truncation=True, return_tensors="pt")']
    else:  # the preprocess function must make the input
        return [f"raise SystemExit({_q(_NO_INPUT.format(main_input=plan.main_input))})"]
    if s.map_dtype:
        inner += _fix_notes(plan, ("map_dtype",))
        inner += [f"# A cast to {s.map_dtype} inside Dataset.map (the spec's map_dtype). Arrow "
                  "stores the values,",
                  "# and what with_format gives back may not be that dtype.",
                  f"return {{k: v.to({_torch_dtype(s.map_dtype)}) if v.is_floating_point() else v "
                  "for k, v in out.items()}"]
    else:
        inner.append("return dict(out)")
    return (["", "def process(rows):"] + ["    " + line for line in inner]
            + ["", "# One map call over all rows"
               + (" (as the pipeline does)." if plan.processor_input == "image"
                  else ", so texts pad to one length and the batch collates."),
               "ds = ds.map(process, batched=True, batch_size=None)"])


def _labels(plan: ExportPlan) -> list[str]:
    labels = plan.labels
    lines = _fix_notes(plan, ("with_labels",))
    accepted = "set(inspect.signature(model.forward).parameters)"
    if labels and labels.column is None:   # the preprocess function makes them
        names = labels.candidates
        lines += [f"# with_labels: the labels come from the preprocess function ({', '.join(names)}).",
                  f"label = next((c for c in {names!r} if c in ds.column_names), None)",
                  "if label is None:",
                  f"    raise SystemExit({_q(_NO_LABELS)})",
                  'if label != "labels":',
                  '    if "labels" in ds.column_names:',
                  '        ds = ds.remove_columns("labels")',
                  '    ds = ds.rename_column(label, "labels")']
        accepted += ' | {"labels"}'
    elif labels:
        label = labels.column
        lines.append(f"# with_labels: the {_q(label)} column goes in as labels, so the model computes "
                     "its loss.")
        if labels.drop_existing == "if-present":
            lines += ['if "labels" in ds.column_names:',
                      '    ds = ds.remove_columns("labels")']
        elif labels.drop_existing == "always":
            lines.append('ds = ds.remove_columns("labels")')
        if label != "labels":
            lines.append(f'ds = ds.rename_column({_q(label)}, "labels")')
        accepted += ' | {"labels"}'
    return lines + ["# Keep the columns model.forward() takes; drop the rest.",
                    f"accepted = {accepted}",
                    "ds = ds.remove_columns([c for c in ds.column_names if c not in accepted])"]


def _format(s: PipelineSpec) -> list[str]:
    if s.format == "python":
        return ['# format: python. No with_format("torch"): rows come back as Python lists.']
    if s.format_dtype:
        return [f"# with_format's dtype= casts every column to {s.format_dtype}, ids and labels "
                "included.",
                f'ds = ds.with_format("torch", dtype={_torch_dtype(s.format_dtype)})']
    return ['ds = ds.with_format("torch")']


def _cast_and_move(s: PipelineSpec) -> list[str]:
    lines = []
    if s.input_dtype and s.input_cast == "all":
        lines += [f"# Every tensor cast to {s.input_dtype}, integer ids and masks included "
                  "(input_cast: all).",
                  f"batch = {{k: v.to({_torch_dtype(s.input_dtype)}) for k, v in batch.items()}}"]
    elif s.input_dtype:
        lines += ["# Cast the floating tensors only: ids, masks and class labels stay integer.",
                  f"batch = {{k: v.to({_torch_dtype(s.input_dtype)}) if v.is_floating_point() else v "
                  "for k, v in batch.items()}"]
    if s.label_dtype:
        method = {"int64": "long", "float32": "float"}[s.label_dtype]
        lines += [f"# The labels as the loss gets them (label_dtype: {s.label_dtype}).",
                  f'batch["labels"] = batch["labels"].{method}()']
    if s.input_device == "model":
        lines += ["# Inputs go where the model's first parameter lives (its embeddings under a "
                  "device map).",
                  "device = next(model.parameters()).device"]
    else:
        lines.append(f"device = torch.device({_q(s.input_device)})")
    return lines + ["batch = {k: v.to(device) for k, v in batch.items()}"]


def _main_output() -> str:
    return '''
def main_output(outputs):
    """(name, tensor) of the output a user looks at: logits, else the first tensor."""
    pairs = [(str(k), v) for k, v in outputs.items() if torch.is_tensor(v)]
    for name, value in pairs:
        if name in ("logits", "last_hidden_state"):
            return name, value
    return pairs[0]'''


def _train(plan: ExportPlan) -> str:
    """The training step of the spec's `train`, as its loop runs it (CONTRACT §1)."""
    s, t = plan.spec, plan.train
    if not t:
        return ""
    scaler, clip, masters = t.grad_scaler, t.clip_grad_norm, t.master_copies
    body = _fix_notes(plan, ("train",))
    if plan.fp8 and plan.fp8.training:   # the forward pass ran as loaded; the steps in FP8
        body += ["device = next(model.parameters()).device", *_fp8_conversion()]
    body.append('params = [p for p in model.parameters() if p.requires_grad and p.is_floating_point()]')
    if masters:
        body += ["# Master weights: a float32 copy of each half parameter is what the optimizer "
                 "updates;",
                 "# the half model runs the forward and backward passes and gets the updated "
                 "values back.",
                 "masters = [torch.nn.Parameter(p.detach().float()) if p.dtype in "
                 "(torch.float16, torch.bfloat16)",
                 "           else p for p in params]"]
        updated = "masters"
    else:
        if t.master_weights:
            body.append("# Master weights: the weights are float32 and the optimizer updates "
                        "them; the forward pass")
            body.append("# runs in half precision under autocast.")
        updated = "params"
    kwargs = [f"lr={t.lr!r}"]
    if t.eps is not None:
        kwargs.append(f"eps={t.eps!r}")
    body.append(f"optimizer = torch.optim.{t.optimizer_class}({updated}, "
                f"{', '.join(kwargs)})")
    if s.autocast:
        device = _q(s.autocast_device) if s.autocast_device else \
            "next(model.parameters()).device.type"
        body.append(f"device_type = {device}")
    if scaler:
        body += ["# The GradScaler multiplies the loss so small float16 gradients survive the "
                 "backward pass.",
                 "scaler = torch.amp.GradScaler(next(model.parameters()).device.type)"]
    body += ["torch.manual_seed(0)  # dropout is on: the same steps on every run",
             "model.train()",
             "steps = []",
             "for step in range(TRAIN_STEPS):"]
    loop = []
    if s.autocast:
        loop += [f"with torch.autocast(device_type, dtype={_torch_dtype(s.autocast)}):",
                 "    loss = model(**batch).loss"]
    else:
        loop.append("loss = model(**batch).loss")
    loop.append("value = loss.item()")
    loop.append("scaler.scale(loss).backward()" if scaler else "loss.backward()")
    if masters:
        loop += ["for p, master in zip(params, masters):",
                 "    if master is not p:  # the half gradient, in float32, for the master copy",
                 "        master.grad = None if p.grad is None else p.grad.float()",
                 "        p.grad = None"]
    clip_line = f"torch.nn.utils.clip_grad_norm_({updated}, {clip!r})"
    if scaler:
        if clip is not None and t.clip_before_unscale:
            loop += ["# As the pipeline does it, in this order: clip_grad_norm_ BEFORE "
                     "scaler.unscale_. A mistake:",
                     "# the gradients are still multiplied by the scale, so clipping sees a "
                     "norm that many times",
                     "# too large and shrinks the true gradients to almost nothing "
                     "(scaler.step unscales them after).",
                     clip_line]
        elif clip is not None:
            loop += ["scaler.unscale_(optimizer)  # before clipping: clip the true gradients",
                     clip_line]
        loop += ["scaler.step(optimizer)  # skipped when the gradients hold inf/NaN",
                 "scaler.update()"]
    else:
        if clip is not None:
            loop.append(clip_line)
        loop.append("optimizer.step()")
    loop.append("optimizer.zero_grad(set_to_none=True)")
    if masters:
        loop += ["with torch.no_grad():  # the updated float32 masters back into the half model",
                 "    for p, master in zip(params, masters):",
                 "        if master is not p:",
                 "            p.copy_(master)"]
    loop += ["finite = math.isfinite(value)",
             'print(f"step {step}: loss {value:.6g}")',
             'steps.append({"index": step, "loss": value if finite else None, "finite": finite})']
    body += ["    " + line for line in loop]
    body.append("return steps")
    return ("def train(model, batch):\n"
            '    """TRAIN_STEPS training steps on the batch, as the pipeline\'s loop runs them."""\n'
            + _indent(body))


def _main(plan: ExportPlan) -> str:
    s = plan.spec
    body = [
        "parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])",
        f'parser.add_argument("--device", default={_q(s.device)},',
        '                    help="auto (the first GPU, else the CPU), cpu, cuda, cuda:N or mps "',
        '                         "(default: %(default)s)")',
        'parser.add_argument("--save-output", metavar="PATH", '
        'help="also save the output tensor (torch.save)")',
        "args = parser.parse_args()",
        "",
        "model = load_model(pick_device(args.device))",
    ]
    if plan.processor_class:
        body.append(f"processor = {plan.processor_class}.from_pretrained("
                    f"{', '.join(['MODEL'] + _hub_args(s))})")
        body.append("batch = build_batch(model, processor)")
    else:
        body.append("batch = build_batch(model)")
    body += _fix_notes(plan, ("autocast", "autocast_device"))
    if s.autocast and s.autocast_device:
        body += [f"# Autocast for device type {s.autocast_device!r}, as the pipeline names it: on "
                 "another device it does nothing.",
                 f"device_type = {_q(s.autocast_device)}"]
    elif s.autocast:
        body += ["# Autocast for the device type the model runs on (autocast is per device type).",
                 "device_type = next(model.parameters()).device.type"]
    if s.autocast:
        body.append(f"with torch.inference_mode(), torch.autocast(device_type, "
                    f"dtype={_torch_dtype(s.autocast)}):")
    else:
        body.append("with torch.inference_mode():")
    body += [
        "    outputs = model(**batch)",
        "",
        "name, value = main_output(outputs)",
        'dtype = str(value.dtype).removeprefix("torch.")',
        "finite = bool(torch.isfinite(value).all())",
        'state = "all finite" if finite else "contains inf or NaN"',
        'print(f"{name}: {dtype}, shape {tuple(value.shape)}, {state}")',
        'print(json.dumps({"output": name, "dtype": dtype, "shape": list(value.shape), '
        '"finite": finite}))',
        "if args.save_output:",
        "    torch.save(value.cpu(), args.save_output)",
    ]
    if plan.train:
        body += ["",
                 "steps = train(model, batch)",
                 'print(json.dumps({"steps": steps}))']
    return ("def main():\n" + _indent(body)
            + '\n\n\nif __name__ == "__main__":\n    main()')


# -- helpers -------------------------------------------------------------------------------------
def _hub_args(s: PipelineSpec) -> list[str]:
    args = ["revision=REVISION"] if s.revision else []
    if s.trust_remote_code:
        args.append("trust_remote_code=True")
    return args


def _fix_notes(plan: ExportPlan, keys: tuple) -> list[str]:
    """A comment naming each applied fix that edited one of `keys`, where the edit acts.

    Fix entries carry their edited keys under "edits" when the engine records them; the list at
    the top of the script names every fix either way.
    """
    return [f"# Fix applied: {_comment_text(fix.title)} [{_comment_text(fix.id)}]"
            for fix in plan.fixes if fix.edits & set(keys)]


def _q(value) -> str:
    """A Python literal for a string, list of strings or None, in double quotes like the rest."""
    return "None" if value is None else json.dumps(value, ensure_ascii=False)


def _torch_dtype(name: str) -> str:
    return f"torch.{name}"


def _comment_text(text) -> str:
    # User text in a comment: one line, no control characters that could end the comment.
    return " ".join(str(text).split())


def _indent(lines: list[str]) -> str:
    return textwrap.indent("\n".join(lines), "    ", lambda line: bool(line.strip()))
