"""`inspect`: a model's tensor inventory and memory per dtype from its config alone.

The model is built on the meta device (shapes without storage), so a 70B config takes seconds
and no weights are read; checkpoint dtypes come from the safetensors headers when present.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from ..common.codec import Document
from ..common.dtypes import BYTES_PER_ELEMENT, FLOAT_NAMES
from ..common.errors import InputError
from ..spec.value import PipelineSpec
from .checkpoint import checkpoint_dtypes

CONFIG_NAME = "config.json"


class LargestLayer(TypedDict):
    name: str
    bytes: int


@dataclass(frozen=True)
class ModelInventory(Document):
    """The `inspect --json` document (CONTRACT §3): a model's tensors and memory per dtype."""

    model: str
    architecture: str
    parameters: int
    tensors: int
    checkpoint_dtypes: dict[str, int] | None    # from the safetensors headers, when there are any
    memory_bytes: dict[str, int]                # the floating parameters, in each dtype
    largest_layer: LargestLayer
    keep_fp32_modules: list[str]
    dtype: str | None = None                    # `--dtype`: the bytes at that dtype
    bytes_at_dtype: int | None = None


def inspect_model(model: str, dtype: str | None = None, trust_remote_code: bool = False,
                  revision: str | None = None, base_dir: str | None = None) -> ModelInventory:
    """The `inspect --json` document (CONTRACT §3) for a local folder, its config.json or a Hub
    id."""
    import torch

    from .loading import load_config, model_folder, quiet_hf, resolve_task

    spec = PipelineSpec(model=model, dataset="synthetic", trust_remote_code=trust_remote_code,
                        revision=revision, base_dir=base_dir)
    folder = _config_folder(spec) or model_folder(spec)
    config = load_config(folder, spec)
    task, arch = resolve_task(config, spec)
    with quiet_hf(), torch.device("meta"):
        try:
            built = _build(config, arch, task, trust_remote_code)
        except Exception as exc:  # noqa: BLE001 - an unbuildable config is bad input, said in one line
            raise InputError(f"model {model!r}: cannot build {arch} from its config "
                             f"({type(exc).__name__}: {str(exc).splitlines()[0][:200]})") from None
    unit = BYTES_PER_ELEMENT[dtype or "float32"]
    parameters = tensors = 0
    largest = ("", 0)
    module_bytes: dict[str, int] = {}
    for name, tensor in list(built.named_parameters()) + list(built.named_buffers()):
        tensors += 1
        count = tensor.numel()
        if isinstance(tensor, torch.nn.Parameter):
            parameters += count
        module = name.rpartition(".")[0]
        module_bytes[module] = module_bytes.get(module, 0) + count * unit
    if module_bytes:
        largest = max(module_bytes.items(), key=lambda item: item[1])
    floating = sum(p.numel() for p in built.parameters() if p.is_floating_point())
    memory = {name: floating * BYTES_PER_ELEMENT[name] for name in FLOAT_NAMES}
    return ModelInventory(
        model=model, architecture=arch, parameters=parameters, tensors=tensors,
        checkpoint_dtypes=checkpoint_dtypes(Path(folder)), memory_bytes=memory,
        largest_layer={"name": largest[0], "bytes": largest[1]},
        keep_fp32_modules=list(getattr(built, "_keep_in_fp32_modules", None) or []),
        dtype=dtype or None, bytes_at_dtype=memory[dtype] if dtype else None)


def _config_folder(spec: PipelineSpec) -> str | None:
    # A config.json is enough for inspect: the path of one means its folder.
    local = spec.local_path(spec.model)
    if local is not None and local.name == CONFIG_NAME and not local.is_dir():
        return str(local.parent)
    return None


def _build(config, arch, task, trust_remote_code):
    import transformers

    from .loading import AUTO_CLASSES

    cls = getattr(transformers, arch, None)
    if cls is not None:
        return cls._from_config(config)
    auto = getattr(transformers, AUTO_CLASSES[task])
    return auto.from_config(config, trust_remote_code=trust_remote_code)
