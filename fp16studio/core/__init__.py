"""The Qt-free engine (CONTRACT §4). Cheap to import: torch, transformers and datasets load
lazily, inside the work."""

from .common.errors import CancelToken, Cancelled, InputError
from .diagnostics.findings import Finding, Fix
from .spec.value import PipelineSpec

__all__ = ["PipelineSpec", "diagnose", "apply_fix", "fix_until_clean", "benchmark",
           "export_script", "inspect_model", "InputError", "Cancelled", "CancelToken",
           "Finding", "Fix", "open_spec", "load_spec", "save_spec"]

_LAZY = {
    "diagnose": ".diagnostics.diagnosis",
    "apply_fix": ".diagnostics.fixing",
    "fix_until_clean": ".diagnostics.fixing",
    "benchmark": ".precision.bench",
    "export_script": ".present.export",
    "inspect_model": ".hf.model_info",
    "open_spec": ".demo.pipelines",
    "load_spec": ".spec.documents",
    "save_spec": ".spec.documents",
}


def __getattr__(name):
    # Keep `import fp16studio.core` light: the heavy modules load on first use.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(name)
