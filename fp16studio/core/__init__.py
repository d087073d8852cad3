"""The Qt-free engine (CONTRACT §4). Cheap to import: torch, transformers and datasets load
lazily, inside the work."""

from .errors import CancelToken, Cancelled, InputError
from .findings import Finding, Fix
from .spec import PipelineSpec

__all__ = ["PipelineSpec", "diagnose", "apply_fix", "fix_until_clean", "benchmark",
           "export_script", "inspect_model", "InputError", "Cancelled", "CancelToken",
           "Finding", "Fix"]

_LAZY = {
    "diagnose": ".diagnosis",
    "apply_fix": ".fixing",
    "fix_until_clean": ".fixing",
    "benchmark": ".bench",
    "export_script": ".export",
    "inspect_model": ".inspect",
}


def __getattr__(name):
    # Keep `import fp16studio.core` light: the heavy modules load on first use.
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(name)
