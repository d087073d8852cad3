"""Loading the model and its processor exactly as the spec says (dtype always explicit)."""

from __future__ import annotations

import contextlib
import fnmatch
import json
from dataclasses import dataclass
from pathlib import Path

from . import dtypes
from .errors import InputError, first_line
from .hub import resolve_model_source
from .spec import PipelineSpec

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
        return str(local)
    return resolve_model_source(spec.model, spec.revision, spec.trust_remote_code)


def load_config(folder: str, spec: PipelineSpec):
    from transformers import AutoConfig

    _refuse_remote_code(folder, spec)
    try:
        return AutoConfig.from_pretrained(folder, trust_remote_code=spec.trust_remote_code)
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as exc:
        raise InputError(f"model {spec.model!r}: unreadable config ({first_line(exc)})") from None


def _refuse_remote_code(folder: str, spec: PipelineSpec):
    config_path = Path(folder) / "config.json"
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:
        raise InputError(f"model {spec.model!r}: unreadable config.json ({first_line(exc)})") from None
    if not isinstance(config, dict):
        raise InputError(f"model {spec.model!r}: config.json is not an object of settings")
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
              "trust_remote_code": spec.trust_remote_code}
    if spec.device_map:
        kwargs["device_map"] = spec.device_map
    if spec.device_map:
        _check_device_map(spec)
    with quiet_hf():
        try:
            model = cls.from_pretrained(folder, **kwargs)
        except Exception as exc:
            raise _weights_error(spec, exc) from None
    if not spec.device_map:
        model.to(device)
    keep_in_float32(model, spec.keep_fp32)
    model.eval()
    return LoadedModel(model=model, source=folder, task=task, architecture=arch,
                       device=first_device(model))


def _weights_error(spec: PipelineSpec, exc: Exception) -> Exception:
    """What a failed from_pretrained means: damaged or hostile weights are bad input, said in
    one line (torch's pickle refusal spans lines and suggests switching the safety off);
    running out of memory and anything unexpected stay what they are."""
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
    if isinstance(exc, (OSError, ValueError, KeyError, RuntimeError, EOFError)):
        return InputError(f"model {spec.model!r} could not be loaded: {first_line(exc)}")
    return exc


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


def keep_in_float32(model, patterns) -> list[str]:
    """`.float()` every module whose name matches a pattern; returns the names kept."""
    kept = []
    for name, module in model.named_modules():
        if name and any(fnmatch.fnmatchcase(name, p) for p in patterns):
            module.float()
            kept.append(name)
    return kept


def first_device(model):
    """Where inputs should go: the device of the first parameter (the embeddings under a map)."""
    import torch

    for tensor in model.parameters():
        return tensor.device
    return torch.device("cpu")


def load_processor(folder: str, model, spec: PipelineSpec):
    """The model's processor by its main input: tokenizer, image processor or feature extractor."""
    import transformers

    family = processor_family(getattr(model, "main_input_name", "input_ids"))
    with quiet_hf():
        try:
            processor = getattr(transformers, family).from_pretrained(
                folder, trust_remote_code=spec.trust_remote_code)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InputError(f"model {spec.model!r} has no usable {family[4:]} "
                             f"({first_line(exc)})") from None
    if family == "AutoTokenizer":
        _check_tokenizer_fits(processor, model.config, spec)
    return processor


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
