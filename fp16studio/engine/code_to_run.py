"""What a run would execute, read by the engine where it runs (CONTRACT §6): an engine on a box
digests the box's files there, so the window's question and the pins it sends back with each
run name exactly the code the box would run. Tasks the window names ("module:function")."""

from __future__ import annotations

from fp16studio.core.common.files import read_bytes
from fp16studio.core.spec import trust
from fp16studio.core.spec.trust import CodeToRun
from fp16studio.core.spec.value import PipelineSpec

SPEC_CODE_TASK = "fp16studio.engine.code_to_run:spec_code"
SCRIPT_CODE_TASK = "fp16studio.engine.code_to_run:script_code"


def spec_code(path: str, spec: PipelineSpec) -> CodeToRun:
    """The code `spec`, read from the file `path` (this machine's), would run."""
    return trust.read_code(path, spec)


def script_code(path: str) -> CodeToRun:
    """The script at `path` (this machine's), as a trace would run it."""
    from fp16studio.core.script.trace import resolve_script

    return trust.read_script(resolve_script(path))


def check_agreed_script(path: str) -> None:
    """Before a trace runs the script at `path`: it must still be what was agreed to (nothing
    pinned: a script traced on the window's own machine, which the user chose there)."""
    from fp16studio.core.script.trace import resolve_script

    script = resolve_script(path)
    trust.check_agreed(script, read_bytes(script, "script"), "script")
