"""The commands: each reads its inputs, runs core, and prints the result (--json or text)."""

from __future__ import annotations

import os
import sys

from ..core.common.errors import InputError
from ..core.demo.pipelines import DEMO_PREFIX
from ..core.present.terminal import (format_bench, format_diagnosis, format_drift, format_fix,
                                     format_fp8, format_inspect, format_trace)
from ..core.present.ranks import format_ranked_trace
from .remote import cmd_remote_install


def _load_spec(text: str, trust: bool | None = None):
    """The spec; with `trust` given (the commands that run it), only once its code is trusted."""
    from ..core.demo.pipelines import open_spec

    spec = open_spec(text)
    if trust is not None and not str(text).startswith(DEMO_PREFIX):  # demos are our own code
        from ..core.spec import trust as trust_store

        trust_store.require(text, spec, grant=trust)
    return spec


def _output(args, spec_text: str, spec, is_own_kind):
    """args.output once it is safe to write: never one of the command's inputs, a file of
    another kind only with --force; a file that is there is kept as NAME.bak once the new
    one is written whole."""
    from pathlib import Path

    from ..core.common.config_folder import config_dir
    from ..core.common.files import check_output, keep_backup_when_replaced

    inputs = [] if str(spec_text).startswith(DEMO_PREFIX) else [Path(spec_text)]
    if spec.preprocess:
        inputs.append(spec.resolve_path(spec.preprocess.rpartition(":")[0]))
    inputs += [path for path in (spec.local_path(spec.model), spec.local_path(spec.dataset))
               if path is not None]
    path = check_output(args.output, inputs, is_own_kind, force=args.force)
    folder = config_dir().resolve()
    if folder == path.resolve() or folder in path.resolve().parents:
        raise InputError(f"output {args.output}: in fp16studio's own config folder ({folder}), where "
                         "it keeps the trust store and the recent files; write somewhere else")
    keep_backup_when_replaced(path)
    return path


def _is_spec_file(path) -> bool:
    from ..core.spec.documents import load_spec

    try:
        load_spec(path)
    except (InputError, OSError):
        return False
    return True


def _is_script(path) -> bool:
    from ..core.present.export import SIGNATURE
    from ..core.common.files import starts_with

    return starts_with(path, SIGNATURE)


def _is_report(path) -> bool:
    from ..core.common.files import starts_with
    from ..core.present.html import SIGNATURE

    return starts_with(path, SIGNATURE)


def cmd_diagnose(args) -> int:
    from ..core.diagnostics.diagnosis import diagnose

    report = diagnose(_load_spec(args.spec, trust=args.trust))
    _emit(report, args, format_diagnosis)
    return 0 if report.ok else 1


def cmd_fix(args) -> int:
    from ..core.diagnostics.fixing import fix_run
    from ..core.spec.documents import save_spec

    if args.rounds < 1:
        raise InputError("--rounds must be at least 1")
    spec = _load_spec(args.spec, trust=args.trust)
    output = _output(args, args.spec, spec, _is_spec_file)
    run = fix_run(spec, max_rounds=args.rounds)
    save_spec(run.spec, output)
    _emit(run, args, lambda r: format_fix(r, args.output))
    return 0 if run.ok else 1


def cmd_bench(args) -> int:
    from ..core.precision.bench import benchmark

    if (args.warmup < 0 or args.min_iterations < 1 or args.min_seconds < 0
            or args.min_rounds < 1):
        raise InputError("bench: --warmup >= 0, --min-iterations >= 1, --min-seconds >= 0, "
                         "--min-rounds >= 1")
    result = benchmark(_load_spec(args.spec, trust=args.trust), variants=args.variants,
                       warmup=args.warmup, min_iterations=args.min_iterations,
                       min_seconds=args.min_seconds, min_rounds=args.min_rounds)
    _emit(result, args, format_bench)
    return 0


def cmd_drift(args) -> int:
    """0 within tolerance; 1 precision-drift, overflow, or a variant that cannot run."""
    from ..core.precision.drift import drift

    result = drift(_load_spec(args.spec, trust=args.trust), variant=args.variant)
    _emit(result, args, format_drift)
    return 0 if result.ok else 1


def cmd_fp8(args) -> int:
    """0 a plan with layers to convert; 1 none can go to FP8, or the device cannot run the
    recipe; with --export, the script that converts exactly the plan's layers."""
    from ..core.precision.fp8 import fp8_plan

    spec = _load_spec(args.spec, trust=args.trust)
    output = _output(args, args.spec, spec, _is_script) if args.output else None
    plan = fp8_plan(spec, recipe=args.recipe)
    if output is not None:
        from ..core.present.export import export_fp8_script

        export_fp8_script(spec, plan, output)
        print(f"wrote {args.output}", file=sys.stderr if args.json else sys.stdout)
    _emit(plan, args, format_fp8)
    return 0 if plan.ok else 1


def cmd_export(args) -> int:
    from ..core.present.export import export_script

    spec = _load_spec(args.spec)  # export never runs the preprocess: no trust needed
    export_script(spec, _output(args, args.spec, spec, _is_script))
    print(f"wrote {args.output}")
    return 0


def cmd_report(args) -> int:
    """Exit like diagnose (1 when the run has error findings); the report is written either way."""
    from ..core.diagnostics.diagnosis import diagnose
    from ..core.present.html import render_report
    from ..core.common.files import write_text_atomic

    spec = _load_spec(args.spec, trust=args.trust)
    output = _output(args, args.spec, spec, _is_report)
    report = diagnose(spec)
    bench = None
    if args.bench:
        from ..core.precision.bench import benchmark

        bench = benchmark(spec, variants=args.variants)
    write_text_atomic(output, render_report(report, bench))
    print(f"wrote {args.output}")
    return 0 if report.ok else 1


def cmd_inspect(args) -> int:
    from ..core.common import dtypes
    from ..core.hf.model_info import CONFIG_NAME, inspect_model

    dtype = dtypes.normalize(args.dtype, "--dtype") if args.dtype else None
    config = os.path.basename(args.model) == CONFIG_NAME   # a model's config.json: its folder
    if args.model.startswith(DEMO_PREFIX) or (not config and os.path.isfile(args.model) and
                                              args.model.lower().endswith((".json", ".toml", ".fp16studio"))):
        raise InputError(f"inspect takes a model (a save_pretrained folder, its {CONFIG_NAME}, or a "
                         f"Hub id), not a spec: {args.model}; its \"model\" is what to inspect")
    model = inspect_model(args.model, dtype=dtype, trust_remote_code=args.trust_remote_code,
                          base_dir=os.getcwd())
    _emit(model, args, lambda m: format_inspect(m, dtype))
    return 0


def cmd_demo(args) -> int:
    from ..core.demo.pipelines import DEMOS, write_demo

    paths = write_demo(args.dir)
    print(f"wrote the demo to {args.dir}:")
    for path in paths:
        print(f"  {path}  ({DEMOS[path.stem]})")
    print(f"try: fp16studio diagnose {paths[0]}")
    return 0


def cmd_trace(args) -> int:
    """The script's own lines pass through as they come (to stderr with --json), then the result."""
    from ..core.script.trace import readable, script_bytes, trace_script

    if bool(args.apply) != bool(args.output):
        raise InputError("--apply FIX_ID and -o FIXED.py go together: the fixed copy is written "
                         "to FIXED.py, never over the script")
    closed = []

    def output(stream, line):
        target = sys.stderr if args.json or stream == "stderr" else sys.stdout
        if closed:
            return
        try:
            raw = getattr(target, "buffer", None)
            if raw is not None:   # the script's own bytes, as `python SCRIPT` writes them
                raw.write(script_bytes(line) + b"\n")
                raw.flush()
            else:                 # a stream without bytes under it (a test's capture)
                print(readable(line), file=target, flush=True)
        except BrokenPipeError:  # `| head` went away: the script runs on, unread; exit 141 after
            closed.append(stream)
            os.dup2(os.open(os.devnull, os.O_WRONLY), target.fileno())

    # What is piped in reaches the script, as with `python SCRIPT`; a terminal does not (the
    # script runs in a session of its own, where reading the terminal would stop it).
    piped = sys.stdin if sys.stdin is not None and not sys.stdin.isatty() else None
    if args.launch is not None:
        if args.apply:
            raise InputError("--apply and --launch: apply a fix to the script traced alone")
        result = _trace_launch(args, output)
    else:
        if args.rank_wait is not None:
            raise InputError("--rank-wait goes with --launch")
        result = trace_script(args.script, args.script_args, timeout=args.script_timeout,
                              output=output, stdin=piped, python=args.python, steps=args.steps)
    if closed:
        raise BrokenPipeError
    if args.apply:
        result.applied, result.fixed_script = _fixed_copy(result, args)
    _emit(result, args, format_ranked_trace if args.launch is not None else format_trace)
    if args.apply and not args.json:
        print(f"wrote {result.fixed_script} with "
              f"{', '.join(a['id'] for a in result.applied)}; "
              f"trace it: fp16studio trace {result.fixed_script}")
    return 0 if result.ok else 1


def _fixed_copy(result, args) -> tuple[list, str]:
    """`--apply ID[:LINE] -o FIXED.py`: the script with those fixes, written to a copy (never
    the script itself)."""
    from pathlib import Path

    from ..core.common.files import check_output, keep_backup
    from ..core.script.proof import fixed_script

    text, applied = fixed_script(result.script, result.findings, args.apply)
    path = check_output(args.output, [Path(result.script)], lambda p: p.suffix == ".py",
                        force=args.force)
    keep_backup(path)
    path.write_text(text)
    return applied, str(path)


def cmd_schema(args) -> int:
    import json

    from ..core.present.schemas import document_schema

    print(json.dumps(document_schema(args.name), indent=2))
    return 0


def _trace_launch(args, output):
    """`trace --launch LAUNCHER`: every rank of the user's launcher traced, merged."""
    from ..core.script.ranks import RANK_WAIT_S, trace_launch

    if args.python is not None:
        raise InputError("--python and --launch: the launcher runs the Python it was installed "
                         "with; name that launcher (--launch \"/path/to/venv/bin/torchrun ...\")")
    return trace_launch(args.launch, args.script, args.script_args, timeout=args.script_timeout,
                        rank_wait=RANK_WAIT_S if args.rank_wait is None else args.rank_wait,
                        output=output, steps=args.steps)


COMMANDS = {"diagnose": cmd_diagnose, "fix": cmd_fix, "bench": cmd_bench, "drift": cmd_drift,
            "export": cmd_export, "report": cmd_report, "inspect": cmd_inspect, "demo": cmd_demo,
            "trace": cmd_trace, "fp8": cmd_fp8, "schema": cmd_schema,
            "remote-install": cmd_remote_install}


def _print_json(doc, args):
    args.json_doc = doc  # printed once the command is done and stdout is ours again


def _emit(result, args, formatter) -> None:
    """The command's --json document (the result's), or its human-readable form."""
    if args.json:
        _print_json(result.to_json(), args)
    else:
        print(formatter(result))
