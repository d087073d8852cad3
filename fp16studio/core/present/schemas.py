"""The JSON Schema of each document fp16studio writes (`fp16studio schema NAME`).

Generated from the document's definition when asked, not kept as files: a schema cannot drift
from the code that writes the document, and nothing has to be regenerated at build time. Its
`version` (core.common.codec.SCHEMA_VERSION) says which shape it describes.
"""

from __future__ import annotations

from ..common.codec import schema
from ..common.errors import InputError


def document_types() -> dict:
    """The name of each document (its command, or the file it is) -> its definition."""
    from ..diagnostics.report import Diagnosis, FixRun
    from ..hf.model_info import ModelInventory
    from ..precision.bench import BenchResult
    from ..precision.drift import DriftResult
    from ..precision.fp8_plan import Fp8Plan
    from ..script.rank_merge import RankedTrace
    from ..script.trace import ScriptTrace
    from ..spec.documents import SessionDocument
    from ..spec.value import PipelineSpec

    return {"diagnose": Diagnosis, "fix": FixRun, "trace": ScriptTrace,
            "trace-launch": RankedTrace, "bench": BenchResult,
            "drift": DriftResult, "fp8": Fp8Plan, "inspect": ModelInventory,
            "session": SessionDocument, "spec": PipelineSpec}


def document_schema(name: str) -> dict:
    """The schema of the document `name`; InputError naming the documents for any other."""
    types = document_types()
    if name not in types:
        raise InputError(f"no document {name!r}: the schemas are {', '.join(types)}")
    return schema(types[name], name)
