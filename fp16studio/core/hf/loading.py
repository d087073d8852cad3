"""Loading the model and its processor exactly as the spec says (dtype always explicit)."""

from __future__ import annotations

import contextlib
import difflib
import fnmatch
from dataclasses import dataclass
from pathlib import Path

from ..common import dtypes
from ..common.errors import InputError, first_line
from ..common.files import regular_file
from ..spec import trust
from ..spec.value import PipelineSpec
from .config_file import read_config
from .hub import resolve_model_source

# Architecture-name suffix -> task family; the first match wins.
_TASK_SUFFIXES = (
    ("ForImageClassification", "image-classification"),
    ("ForSequenceClassification", "sequence-classification"),
    ("ForCausalLM", "causal-lm"),
    ("ForConditionalGeneration", "seq2seq-lm"),
    ("ForSeq2SeqLM", "seq2seq-lm"),
)
AUTO_CLASSES = {
    "image-classification": "AutoModelForImageClassification",
    "sequence-classification": "AutoModelForSequenceClassification",
    "feature-extraction": "AutoModel",
    "causal-lm": "AutoModelForCausalLM",
    "seq2seq-lm": "AutoModelForSeq2SeqLM",
}


@dataclass
class LoadedModel:
    model: object
    source: str            # the local folder it was read from
    task: str
    architecture: str
    device: object         # torch.device of the first parameter (where inputs go)


@contextlib.contextmanager
def quiet_hf():
    """Silence transformers/datasets chatter and progress bars while we load."""
    import datasets
    import transformers

    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    try:
        yield
    finally:
        transformers.logging.set_verbosity(verbosity)


def model_folder(spec: PipelineSpec) -> str:
    local = spec.local_path(spec.model)
    if local is not None:
        if not local.is_dir():
            raise InputError(f"model {spec.model!r}: expected a folder (save_pretrained layout)")
        if not (local / "config.json").is_file():
            raise InputError(f"model {spec.model!r}: the folder has no config.json")
        for weights in sorted(local.glob("*.safetensors")) + sorted(local.glob("*.bin")):
            regular_file(weights, "model weights")   # a FIFO is skipped by the library, unsaid
        return str(local)
    return resolve_model_source(spec.model, spec.revision, spec.trust_remote_code,
                                spec.resolve_path(spec.model))


def load_config(folder: str, spec: PipelineSpec):
    """The model's config, once config.json is read and checked as data (config_file): what
    transformers still refuses is the config's fault, said in one line."""
    from transformers import AutoConfig

    _refuse_remote_code(read_config(folder, spec.model), spec)
    trust.check_agreed_model_code(spec)   # the config class may be the model's own code
    with quiet_hf():
        try:
            return AutoConfig.from_pretrained(folder, **code_kwargs(spec))
        except Exception as exc:  # noqa: BLE001 - the user's settings (or their config class)
            raise InputError(f"model {spec.model!r}: unreadable config "
                             f"({type(exc).__name__}: {first_line(exc)})") from None


def code_kwargs(spec: PipelineSpec) -> dict:
    """from_pretrained's arguments for the model's own code: code consented to is read from the
    cache that was digested (`trust.model_code_sources`), never a newer revision from the Hub."""
    return {"trust_remote_code": spec.trust_remote_code,
            **({"local_files_only": True} if trust.model_code_pinned(spec) else {})}


def _refuse_remote_code(config: dict, spec: PipelineSpec):
    if config.get("auto_map") and not spec.trust_remote_code:
        import transformers

        known = any(hasattr(transformers, arch) for arch in config.get("architectures") or ())
        if not known:
            raise InputError(f"model {spec.model!r} needs its own code from the repository; "
                             "set trust_remote_code to true only if you trust its author")


def resolve_task(config, spec: PipelineSpec) -> tuple[str, str]:
    """(task family, architecture name) from the spec or config.architectures."""
    architectures = list(getattr(config, "architectures", None) or [])
    arch = architectures[0] if architectures else type(config).__name__.replace("Config", "Model")
    if spec.task != "auto":
        return spec.task, arch
    for suffix, task in _TASK_SUFFIXES:
        if arch.endswith(suffix):
            return task, arch
    return "feature-extraction", arch


def model_class_name(spec: PipelineSpec, task: str, arch: str) -> str:
    """The transformers class to load: the architecture itself, or the task's Auto class."""
    import transformers

    if spec.task == "auto" and hasattr(transformers, arch):
        if not isinstance(getattr(transformers, arch), type) or not issubclass(
                getattr(transformers, arch), transformers.PreTrainedModel):
            raise InputError(f"model {spec.model!r}: config.architectures names {arch}, "
                             "which is not a model class")
        return arch
    return AUTO_CLASSES[task]


def resolve_device(spec: PipelineSpec):
    """The torch.device the spec asks for, or None when that device is not on this machine."""
    import torch

    name = spec.device
    if name == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda"):
        if not torch.cuda.is_available():
            return None
        index = int(name[5:]) if ":" in name else 0
        return torch.device("cuda", index) if index < torch.cuda.device_count() else None
    if name == "mps":
        mps = getattr(torch.backends, "mps", None)
        return torch.device("mps") if mps is not None and mps.is_available() else None
    return torch.device(name)


def load_model(spec: PipelineSpec, device) -> LoadedModel:
    import transformers

    folder = model_folder(spec)
    config = load_config(folder, spec)
    task, arch = resolve_task(config, spec)
    cls = getattr(transformers, model_class_name(spec, task, arch))
    kwargs = {"dtype": "auto" if spec.model_dtype == "auto" else dtypes.to_torch(spec.model_dtype),
              **code_kwargs(spec)}
    if islands_load_float32(spec):
        kwargs["dtype"] = dtypes.to_torch("float32")
    if spec.device_map:
        _check_device_map(spec)
        kwargs["device_map"] = spec.device_map
    trust.check_agreed_model_code(spec)
    with quiet_hf():
        try:
            model = cls.from_pretrained(folder, **kwargs)
        except Exception as exc:  # noqa: BLE001 - _weights_error re-raises what is not bad input
            raise _weights_error(spec, exc) from None
    check_module_patterns(model, spec)
    if not spec.device_map:
        model.to(device)
    if spec.model_cast and not spec.run_in_float32:  # with islands, apply_run_in_float32 casts
        # The user's model.half() / model.to(dtype): the library's float32 modules cast too.
        model.to(dtypes.to_torch(spec.model_cast))
    if spec.run_in_float32:
        apply_run_in_float32(model, spec)
    keep_in_float32(model, spec.keep_fp32)
    model.eval()
    return LoadedModel(model=model, source=folder, task=task, architecture=arch,
                       device=first_device(model))


def auto_dtype(folder: str | Path) -> tuple[str | None, str]:
    """(dtype, where it was read) that `model_dtype: "auto"` resolves to for a local checkpoint:
    transformers 5 takes the config's `dtype` (or the older `torch_dtype`), else the weights'
    own dtype. (None, reason) when neither says. Reads two small files, no torch."""
    from .checkpoint import checkpoint_dtypes

    folder = Path(folder)
    try:
        config = read_config(folder, str(folder))
    except InputError:
        config = {}
    for key in ("dtype", "torch_dtype"):
        value = str(config.get(key) or "").removeprefix("torch.")
        if value in dtypes.FLOAT_NAMES:
            return value, f"config.json {key}"
    counts = {d: n for d, n in (checkpoint_dtypes(folder) or {}).items()
              if dtypes.is_floating_name(d)}
    if counts:
        return max(counts, key=counts.get), "the safetensors weights"
    return None, "no dtype in config.json and no safetensors weights"


def auto_dtype_note(spec: PipelineSpec) -> str:
    """One line for the window: what `model_dtype: "auto"` does, and the dtype it resolves to
    for this model when its files are at hand (a local folder or the Hub cache; never the
    network, so it can run while the user types)."""
    from .hub import cached_snapshot, looks_like_repo_id

    what = "auto: the checkpoint's own dtype (transformers 5's default when no dtype= is given)"
    local = spec.local_path(spec.model) if spec.model else None
    if local is not None:
        folder = str(local) if (local / "config.json").is_file() else None
    else:
        folder = (cached_snapshot(spec.model, "model", spec.revision)
                  if spec.model and looks_like_repo_id(spec.model) else None)
    if folder is None:
        return f"{what}; resolved when the model is loaded"
    dtype, source = auto_dtype(folder)
    if dtype is None:
        return f"{what}; this checkpoint names none ({source}), so float32"
    return f"{what}: {dtype}, from {source}"


def _weights_error(spec: PipelineSpec, exc: Exception) -> Exception:
    """What a failed from_pretrained means: damaged or hostile weights are bad input, said in
    one line (torch's pickle refusal spans lines and suggests switching the safety off);
    running out of memory stays what it is. Nothing of ours runs inside from_pretrained: what
    else it raises is transformers' or the model's own code's failure to load these files
    (transformers 5 reads each weight's name as a pattern: a module named with parentheses,
    `<script>alert('m')</script>`, is looked up as `<script>alert\\1</script>`), not ours."""
    import pickle

    from safetensors import SafetensorError

    if is_oom(exc):
        return exc
    if isinstance(exc, pickle.UnpicklingError):
        unsafe = next((line.strip() for line in str(exc).splitlines() if "GLOBAL" in line), "")
        return InputError(f"model {spec.model!r}: its weights are a pickle that would run code "
                          f"when loaded; refused ({unsafe or first_line(exc)}). Use a "
                          "safetensors checkpoint from a source you trust")
    if isinstance(exc, SafetensorError):
        return InputError(f"model {spec.model!r}: damaged or invalid safetensors weights "
                          f"({first_line(exc)})")
    if isinstance(exc, (OSError, ValueError, KeyError, RuntimeError, EOFError, ArithmeticError)):
        return InputError(f"model {spec.model!r} could not be loaded: {first_line(exc)}")
    return InputError(f"model {spec.model!r} could not be loaded: {type(exc).__name__}: "
                      f"{first_line(exc)}")


def _check_device_map(spec: PipelineSpec):
    """A device_map naming one device (cuda:7) must name one this machine has."""
    import torch

    name = spec.device_map.strip().lower()
    if not (name in ("cpu", "cuda", "mps") or name.startswith("cuda:") or name.isdigit()):
        return  # auto, balanced, sequential...: accelerate's to place
    if name == "cpu":
        return
    if name == "mps":
        mps = getattr(torch.backends, "mps", None)
        present = mps is not None and mps.is_available()
    else:
        index = name.rpartition(":")[2]
        index = int(index) if index.isdigit() else 0
        present = torch.cuda.is_available() and index < torch.cuda.device_count()
    if not present:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        raise InputError(f"device_map: {spec.device_map!r} is not a device of this machine "
                         f"({count} CUDA device(s))")


def literal_pattern(name: str) -> str:
    """An fnmatch pattern that matches exactly the module name `name` (a ModuleDict key may
    hold `[`, `*` or `?`)."""
    return "".join(f"[{c}]" if c in "[*?" else c for c in name)


def check_module_patterns(model, spec: PipelineSpec) -> None:
    """A `keep_fp32` or `run_in_float32` pattern that names no module would do nothing, and the
    run would look as if it had: an error naming the closest module instead."""
    if not (spec.run_in_float32 or spec.keep_fp32):
        return
    # Every path, a shared module's second one included (named_modules lists it once).
    names = [name for name, _ in model.named_modules(remove_duplicate=False) if name]
    for key in ("run_in_float32", "keep_fp32"):
        for pattern in getattr(spec, key):
            if any(fnmatch.fnmatchcase(name, pattern) for name in names):
                continue
            near = difflib.get_close_matches(pattern, names, n=1, cutoff=0.6)
            hint = (f"; did you mean {near[0]!r}?" if near else
                    f"; its module names look like {max(names, key=len)!r}" if names else "")
            raise InputError(f"{key}: {pattern!r} matches no module of {type(model).__name__} "
                             f"(patterns are fnmatch patterns on module names{hint})")


def keep_in_float32(model, patterns) -> list[str]:
    """`.float()` every module whose name matches a pattern; returns the names kept."""
    kept = []
    for name, module in model.named_modules(remove_duplicate=False) if patterns else ():
        if name and any(fnmatch.fnmatchcase(name, p) for p in patterns):
            module.float()
            kept.append(name)
    return kept


def islands_load_float32(spec: PipelineSpec) -> bool:
    """Float32 islands in a model loaded in half: load float32, so the islands keep the
    checkpoint's own float32 weights (a float16 round trip would clip them), then cast the rest."""
    return bool(spec.run_in_float32) and spec.model_dtype in dtypes.HALF_NAMES


def apply_run_in_float32(model, spec: PipelineSpec) -> list[str]:
    """The spec's `run_in_float32`: cast the model to its half dtype (`model_cast`, else
    `model_dtype`) except the islands (and, unless it is a `model_cast`, the library's own float32
    modules, as from_pretrained keeps them), then run each island in float32 at its boundaries.
    Returns the island names; a model that is not half has none. With islands, the spec's
    `model_cast` is this cast: no other cast of the whole model may follow it."""
    # `model_cast` (the user's model.half()) casts the library's float32 modules too.
    half = spec.model_cast if spec.model_cast in dtypes.HALF_NAMES else (
        spec.model_dtype if islands_load_float32(spec) else None)
    for name in island_names(model, spec.run_in_float32):  # before the cast: float32 values kept
        _untie_from_outside(model, name)
    if half is not None:
        library = () if spec.model_cast else library_float32_modules(model, half)
        cast_outside_islands(model, dtypes.to_torch(half), spec.run_in_float32, library)
    # Decided before the islands turn float32 (they may hold most of the parameters).
    dtype = dtypes.to_torch(half) if half else model_half_dtype(model)
    if dtype is None:
        return []
    return [name for name, _ in float32_islands(model, spec.run_in_float32, dtype)]


def library_float32_modules(model, half: str) -> tuple:
    """The module patterns from_pretrained keeps in float32 when loading in `half`."""
    names = set(getattr(model, "_keep_in_fp32_modules_strict", None) or ())
    if half == "float16":
        names |= set(getattr(model, "_keep_in_fp32_modules", None) or ())
    return tuple(sorted(names))


def island_names(model, patterns) -> list[str]:
    """The outermost modules matching `patterns`: a match inside an island is part of it."""
    names = []
    for name, _ in model.named_modules():
        inside = any(name.startswith(n + ".") for n in names)
        if name and not inside and any(fnmatch.fnmatchcase(name, p) for p in patterns):
            names.append(name)
    return names


def cast_outside_islands(model, dtype, patterns, library=()) -> None:
    """Every floating parameter and buffer to `dtype`, except inside the islands and those whose
    name the library's float32 patterns hit (matched the way transformers matches them)."""
    import re

    islands = island_names(model, patterns)
    kept = re.compile("|".join(p.replace("*", ".*") for p in library)) if library else None
    tensors = list(model.named_parameters()) + list(model.named_buffers())
    for name, tensor in tensors:
        if not tensor.is_floating_point() or any(name.startswith(i + ".") for i in islands):
            continue
        if kept is not None and kept.search(name):
            continue
        tensor.data = tensor.data.to(dtype)


def model_half_dtype(model):
    """The half dtype most floating parameters hold, or None for a model that is not half."""
    import torch

    counts: dict = {}
    for param in model.parameters():
        if param.is_floating_point():
            counts[param.dtype] = counts.get(param.dtype, 0) + param.numel()
    dtype = max(counts, key=counts.get, default=None)
    return dtype if dtype in (torch.float16, torch.bfloat16) else None


def float32_islands(model, patterns, dtype) -> list:
    """Run the modules matching `patterns` in float32 inside a `dtype` model: their weights
    float32, floating inputs cast up on the way in, floating outputs cast back to `dtype` on the
    way out. Returns [(name, hook handles)]; remove the handles to undo the boundaries."""
    import torch

    def cast_in(module, args, kwargs):
        return cast_floating(args, torch.float32), cast_floating(kwargs, torch.float32)

    def cast_out(module, args, output):
        return cast_floating(output, dtype)

    islands = []
    for name in island_names(model, patterns):
        module = model.get_submodule(name)
        _untie_from_outside(model, name)
        module.float()
        islands.append((name, (module.register_forward_pre_hook(cast_in, with_kwargs=True),
                               module.register_forward_hook(cast_out))))
    return islands


def _untie_from_outside(model, island: str) -> None:
    """Give the island its own copy of each parameter it shares with a module outside it (tied
    word embeddings: an lm_head island shares its weight with embed_tokens), so casting the
    island to float32 leaves its partner in half precision."""
    import torch

    outside = {id(param) for name, module in model.named_modules()
               if name != island and not name.startswith(island + ".")
               for param in module._parameters.values() if param is not None}
    for module in model.get_submodule(island).modules():
        for key, param in module._parameters.items():
            if param is not None and id(param) in outside:
                module._parameters[key] = torch.nn.Parameter(param.detach().clone(),
                                                             requires_grad=param.requires_grad)


def cast_floating(value, dtype):
    """`value` with its floating tensors cast to `dtype`, through tuples, lists and dicts
    (ModelOutputs keep their class); anything else as it is."""
    import torch

    if torch.is_tensor(value):
        return value.to(dtype) if value.is_floating_point() else value
    if isinstance(value, dict):
        cast = {k: cast_floating(v, dtype) for k, v in value.items()}
        return type(value)(**cast) if type(value) is not dict else cast
    if isinstance(value, (tuple, list)) and not hasattr(value, "_fields"):
        return type(value)(cast_floating(v, dtype) for v in value)
    return value


def first_device(model):
    """Where inputs should go: the device of the first parameter (the embeddings under a map)."""
    import torch

    for tensor in model.parameters():
        return tensor.device
    return torch.device("cpu")


def load_processor(folder: str, model, spec: PipelineSpec):
    """The model's processor by its main input: tokenizer, image processor or feature extractor."""
    import transformers

    family = processor_class(model)
    trust.check_agreed_model_code(spec)   # a tokenizer's auto_map may name code too
    with quiet_hf():
        try:
            processor = getattr(transformers, family).from_pretrained(folder, **code_kwargs(spec))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InputError(f"model {spec.model!r} has no usable {family[4:]} "
                             f"({first_line(exc)})") from None
    if family == "AutoTokenizer":
        _check_tokenizer_fits(processor, model.config, spec)
    return processor


def processor_class(model) -> str:
    """The Auto class users load for this model: AutoProcessor when it takes text and another
    medium (CLIPModel, BLIP: the processor makes both), else by its main input."""
    import inspect

    taken = set(inspect.signature(model.forward).parameters) & set(_MEDIA_INPUTS)
    if "input_ids" in taken and len(taken) > 1:
        return "AutoProcessor"
    return processor_family(getattr(model, "main_input_name", "input_ids"))


_MEDIA_INPUTS = ("input_ids", "pixel_values", "input_features", "input_values")


def processor_family(main_input: str) -> str:
    """The Auto class that makes a model's main input: tokenizer, image processor, extractor."""
    return {"input_ids": "AutoTokenizer", "pixel_values": "AutoImageProcessor"}.get(
        main_input, "AutoFeatureExtractor")


def _check_tokenizer_fits(tokenizer, config, spec):
    # A tokenizer from another model produces ids past the embedding table: index errors later.
    vocab = getattr(config, "vocab_size", None) or getattr(
        getattr(config, "text_config", None), "vocab_size", None)
    if vocab and len(tokenizer) > vocab:
        raise InputError(f"model {spec.model!r}: its tokenizer has {len(tokenizer)} tokens but the "
                         f"model's vocabulary only {vocab}: they do not belong together")


def is_oom(exc: BaseException) -> bool:
    return "out of memory" in str(exc).lower() or type(exc).__name__ == "OutOfMemoryError"
