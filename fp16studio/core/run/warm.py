"""A warm model: the last loaded model and processor, kept for the next run that loads the same.

A fix that changes only the data side (casts, columns, batch size, autocast...) re-runs on the
same weights; loading is 15-60% of a run. The cache is keyed on the spec keys that decide what
is loaded (and on the model folder's files, so a model saved again is read again), holds one
model, and gives its memory back when the key changes. A run must leave the model as it found
it: hooks are removed by the tracer, autocast and inference mode are context managers; as a
guard, a model whose parameter dtypes, devices, training flag or hooks changed is reloaded.
The config is put back as it was loaded: a forward pass writes to it (a classifier records the
`problem_type` its first labels implied, so float labels once would make every later run
multi-label).
"""

from __future__ import annotations

import copy
import gc
from pathlib import Path

from ..common.errors import report_progress
from ..spec.value import PipelineSpec

# Everything that changes the loaded model or its processor.
LOADING_KEYS = ("model", "revision", "task", "trust_remote_code", "device", "device_map",
                "model_dtype", "keep_fp32", "model_cast", "run_in_float32")


def loading_key(spec: PipelineSpec) -> tuple:
    """What decides the loaded model: the loading keys, with a local model's folder resolved
    and its files' sizes and modification times."""
    key = tuple((name, getattr(spec, name)) for name in LOADING_KEYS)
    local = spec.local_path(spec.model)
    if local is None or not local.is_dir():
        return key
    files = tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns)
                         for p in Path(local).iterdir() if p.is_file()))
    return key + (("folder", str(local.resolve())), ("files", files))


class WarmModel:
    """Holds one loaded model; `load(spec)` returns it when the loading keys match."""

    def __init__(self):
        self._key = None
        self._loaded = None
        self._processor = None
        self._state = None
        self._config = None
        self.loads = 0  # models actually read, for the curious (and the tests)

    def load(self, spec: PipelineSpec, progress=None):
        """(LoadedModel, processor) for the spec, from the cache when it still fits."""
        from .pipeline import prepare_model

        key = loading_key(spec)
        if key == self._key and _state(self._loaded.model) == self._state:
            report_progress(progress, "model", f"{spec.model} is already loaded")
            _restore(self._loaded.model.config, self._config)
            return self._loaded, self._processor
        self.clear()
        loaded, processor = prepare_model(spec, progress)
        self._key, self._loaded, self._processor = key, loaded, processor
        self._state = _state(loaded.model)
        self._config = copy.deepcopy(loaded.model.config.__dict__)
        self.loads += 1
        return loaded, processor

    def clear(self):
        """Drop the model and give its memory back (the GPU's at once)."""
        had_model = self._loaded is not None
        self._key = self._loaded = self._processor = self._state = self._config = None
        if had_model:
            gc.collect()
            import torch

            if torch.cuda.is_available():
                torch.cuda.empty_cache()


def _state(model) -> tuple:
    """What a run must not change: dtypes and devices of every tensor, mode, hooks."""
    tensors = tuple((name, t.dtype, t.device) for name, t in model.state_dict(keep_vars=True).items())
    hooks = sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())
    return tensors, model.training, hooks


def _restore(config, saved: dict) -> None:
    """The config as it was loaded, in place (the model's submodules share the object)."""
    config.__dict__.clear()
    config.__dict__.update(copy.deepcopy(saved))
