"""The `fp16studio` command: the same engine as the window, for remote GPU boxes and CI.

Exit codes (CONTRACT §3): 0 fine, 1 error findings / not fixed, 2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import threading
import warnings

from . import __version__
from .core.errors import InputError
from .core.presentation import finding_lines
from .core.units import format_bytes

BAD_INPUT = 2
SIGPIPE_STATUS = 141  # what a shell reports for a writer whose reader closed the pipe
# After --timeout, how long native code may take to return to Python before the process ends.
WATCHDOG_GRACE_S = 10.0


class _Parser(argparse.ArgumentParser):
    """argparse, but a wrong command line is one line and exit 2 (CONTRACT §3), not a usage
    block; --help still prints the usage."""

    def error(self, message):
        self.exit(BAD_INPUT, f"fp16studio: {message} (see: {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="fp16studio",
        description="Find and fix half-precision problems in Hugging Face pipelines.",
        epilog="With no command the desktop app opens the built-in demo. SPEC is a .json/.toml "
               "spec file or demo:NAME.")
    parser.add_argument("--version", action="version", version=f"fp16studio {__version__}")
    parser.add_argument("--install-desktop", action="store_true",
                        help="add fp16studio to this user's application menu, then exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    gui = sub.add_parser("gui", help="open the desktop app (the demo without SPEC)")
    gui.add_argument("spec", nargs="?", metavar="SPEC")

    diag = sub.add_parser("diagnose", help="load, run one traced forward pass, print findings")
    diag.add_argument("spec", metavar="SPEC")
    diag.add_argument("--json", action="store_true", help="print one JSON document")
    _run_options(diag)

    fix = sub.add_parser("fix", help="apply first fixes and re-run until no error remains")
    fix.add_argument("spec", metavar="SPEC")
    fix.add_argument("-o", "--output", required=True, metavar="FIXED", help="fixed spec to write")
    fix.add_argument("--rounds", type=int, default=5, help="most fixes to apply (default 5)")
    fix.add_argument("--json", action="store_true")
    _run_options(fix)
    _force_option(fix)

    bench = sub.add_parser("bench", help="measure each precision variant on the same batch")
    bench.add_argument("spec", metavar="SPEC")
    bench.add_argument("--variants", metavar="V,...",
                       help="comma-separated: float32,tf32,float16,bfloat16,autocast-float16,"
                            "autocast-bfloat16 (default: all; tf32 on NVIDIA GPUs of compute "
                            "capability 8.0 and newer)")
    bench.add_argument("--warmup", type=int, default=3, help="untimed calls first (default 3)")
    bench.add_argument("--min-iterations", type=int, default=20,
                       help="timed calls per variant, at least (default 20)")
    bench.add_argument("--min-seconds", type=float, default=1.0,
                       help="seconds per variant, at least (default 1.0)")
    bench.add_argument("--min-rounds", type=int, default=5,
                       help="interleaved rounds of all variants, at least (default 5)")
    bench.add_argument("--json", action="store_true")
    _run_options(bench)

    drift = sub.add_parser("drift", help="float32 against a half variant, module by module")
    drift.add_argument("spec", metavar="SPEC")
    drift.add_argument("--variant", metavar="V",
                       help="float16, bfloat16, autocast-float16 or autocast-bfloat16 (default: "
                            "the spec's own half precision, else float16)")
    drift.add_argument("--json", action="store_true", help="print one JSON document")
    _run_options(drift)

    export = sub.add_parser("export", help="write a runnable script of the pipeline")
    export.add_argument("spec", metavar="SPEC")
    export.add_argument("-o", "--output", required=True, metavar="SCRIPT.py")
    _force_option(export)

    report = sub.add_parser("report", help="diagnose (and optionally bench), write an HTML report")
    report.add_argument("spec", metavar="SPEC")
    report.add_argument("-o", "--output", required=True, metavar="REPORT.html")
    report.add_argument("--bench", action="store_true", help="also measure the precision variants")
    report.add_argument("--variants", metavar="V,...", help="with --bench: the variants to measure")
    _run_options(report)
    _force_option(report)

    insp = sub.add_parser("inspect", help="tensor inventory and memory per dtype from the config")
    insp.add_argument("model", metavar="MODEL", help="local folder, config.json or Hub id")
    insp.add_argument("--dtype", help="dtype to size the model at (float32, float16, bfloat16)")
    insp.add_argument("--trust-remote-code", action="store_true")
    insp.add_argument("--json", action="store_true")

    trace = sub.add_parser("trace", help="run your own script with the tracer on and diagnose "
                                         "the models it runs",
                           usage="fp16studio trace SCRIPT [--json] [--timeout S] [-- ARGS...]",
                           epilog="Everything after -- is passed to the script as its arguments.")
    trace.add_argument("script", metavar="SCRIPT", help="a Python script, or demo:NAME")
    trace.add_argument("--json", action="store_true",
                       help="print one JSON document (the script's own output goes to stderr)")
    # Its own dest: the script's time limit ends the script and diagnoses what ran, where the
    # other commands' --timeout ends fp16studio itself.
    trace.add_argument("--timeout", type=float, metavar="S", dest="script_timeout",
                       help="stop the script after S seconds and diagnose what ran")

    demo = sub.add_parser("demo", help="write the built-in demo model, dataset and specs to DIR")
    demo.add_argument("dir", nargs="?", default="fp16studio-demo", metavar="DIR")
    return parser


def _run_options(parser):
    """Options of the commands that run a pipeline (and so, maybe, the user's preprocess)."""
    parser.add_argument("--trust", action="store_true",
                        help="run the spec's preprocess code: you read it and trust it "
                             "(remembered until the spec or its code changes)")
    parser.add_argument("--timeout", type=float, metavar="S",
                        help="give up after S seconds (exit 2): a pipeline that hangs")


def _force_option(parser):
    parser.add_argument("--force", action="store_true",
                        help="replace an existing output file of another kind (kept as .bak)")


def main(argv: list[str] | None = None) -> int:
    argv, script_args = _split_script_args(list(sys.argv[1:] if argv is None else argv))
    args = build_parser().parse_args(argv)
    args.script_args = script_args
    if args.install_desktop:
        return _install_desktop()
    if args.command in (None, "gui"):
        return _gui(getattr(args, "spec", None))
    _quiet_libraries()
    try:
        with _time_limit(getattr(args, "timeout", None)), _stdout_for(args):
            code = COMMANDS[args.command](args)
        if getattr(args, "json_doc", None) is not None:
            json.dump(args.json_doc, sys.stdout, indent=2, default=str)
            sys.stdout.write("\n")
        return code
    except InputError as exc:
        print(f"fp16studio: {one_line(str(exc))}", file=sys.stderr)
        return BAD_INPUT
    except TimedOut as exc:
        print(f"fp16studio: {exc}", file=sys.stderr)
        return BAD_INPUT
    except KeyboardInterrupt:
        print("fp16studio: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (`| head`): nothing left to say, no error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return SIGPIPE_STATUS
    except SystemExit as exc:  # user code that exits is never a quiet success
        print(f"fp16studio: code run by the pipeline called sys.exit({exc.code!r})",
              file=sys.stderr)
        return BAD_INPUT
    except Exception as exc:  # a bug of ours: one line, the traceback on request
        if os.environ.get("FP16STUDIO_DEBUG"):
            raise
        print(f"fp16studio: internal error: {type(exc).__name__}: {one_line(str(exc))} "
              "(set FP16STUDIO_DEBUG=1 for the traceback)", file=sys.stderr)
        return 3


def _split_script_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """`trace SCRIPT [options] -- ARGS`: what follows the first -- belongs to the script."""
    if argv[:1] == ["trace"] and "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, []


def _install_desktop() -> int:
    from .desktop import install_desktop

    try:
        paths = install_desktop()
    except (OSError, InputError) as exc:
        print(f"fp16studio: cannot install the desktop entry: {exc}", file=sys.stderr)
        return BAD_INPUT
    for path in paths:
        print(f"installed {path}")
    return 0


def _gui(spec: str | None) -> int:
    from .gui.app import main as gui_main

    return gui_main([spec] if spec else [])


def _quiet_libraries():
    # Library deprecation chatter buries the one line the user needs; our own warnings stay.
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for category in (UserWarning, FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category)
        warnings.filterwarnings("default", category=category, module="fp16studio")


def _load_spec(text: str, trust: bool | None = None):
    """The spec; with `trust` given (the commands that run it), only once its code is trusted."""
    from .core.spec import DEMO_PREFIX, PipelineSpec

    spec = PipelineSpec.load(text)
    if trust is not None and not str(text).startswith(DEMO_PREFIX):  # demos are our own code
        from .core import trust as trust_store

        trust_store.require(text, spec, grant=trust)
    return spec


def _output(args, spec_text: str, spec, is_own_kind):
    """args.output once it is safe to write: never one of the command's inputs, a file of
    another kind only with --force; a file that is there is kept as NAME.bak."""
    from pathlib import Path

    from .core.files import check_output, keep_backup
    from .core.spec import DEMO_PREFIX

    inputs = [] if str(spec_text).startswith(DEMO_PREFIX) else [Path(spec_text)]
    if spec.preprocess:
        inputs.append(spec.resolve_path(spec.preprocess.rpartition(":")[0]))
    inputs += [path for path in (spec.local_path(spec.model), spec.local_path(spec.dataset))
               if path is not None]
    path = check_output(args.output, inputs, is_own_kind, force=args.force)
    keep_backup(path)
    return path


def _is_spec_file(path) -> bool:
    from .core.spec import PipelineSpec

    try:
        PipelineSpec.load(path)
    except (InputError, OSError):
        return False
    return True


def _is_script(path) -> bool:
    from .core.export import SIGNATURE
    from .core.files import starts_with

    return starts_with(path, SIGNATURE)


def _is_report(path) -> bool:
    from .core.files import starts_with
    from .core.html_report import SIGNATURE

    return starts_with(path, SIGNATURE)


class TimedOut(BaseException):
    """--timeout ran out (raised in the main thread by the alarm). A BaseException, like
    KeyboardInterrupt, so that no `except Exception` on the way (the user's code, a library,
    the pipeline's own failure handling) turns it into something else."""


@contextlib.contextmanager
def _time_limit(seconds: float | None):
    """Stop the command after `seconds`: an alarm interrupts Python code (a preprocess sleeping
    or looping); a watchdog ends the process if native code does not return to Python."""
    if seconds is None:
        yield
        return
    if seconds <= 0:
        raise InputError("--timeout must be more than 0 seconds")
    message = f"gave up after --timeout {seconds:g} s (the pipeline did not finish)"

    def on_alarm(signum, frame):
        raise TimedOut(message)

    def watchdog():
        if not done.wait(seconds + WATCHDOG_GRACE_S):
            print(f"fp16studio: {message}", file=sys.__stderr__, flush=True)
            os._exit(BAD_INPUT)

    done = threading.Event()
    threading.Thread(target=watchdog, daemon=True).start()
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        done.set()


@contextlib.contextmanager
def _stdout_for(args):
    """With --json, stdout carries one JSON document, printed at the end: whatever else writes
    to stdout meanwhile (a preprocess that prints, a library) goes to stderr, down to the file
    descriptor."""
    if not getattr(args, "json", False):
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)


def one_line(text: str) -> str:
    """Error text as the one line the command line promises (library messages span lines)."""
    return " ".join(text.split())


def cmd_diagnose(args) -> int:
    from .core.diagnosis import diagnose

    report = diagnose(_load_spec(args.spec, trust=args.trust))
    _emit(report.to_json(), args, format_diagnosis)
    return 0 if report.ok else 1


def cmd_fix(args) -> int:
    from .core.fixing import fix_until_clean

    if args.rounds < 1:
        raise InputError("--rounds must be at least 1")
    spec = _load_spec(args.spec, trust=args.trust)
    output = _output(args, args.spec, spec, _is_spec_file)
    report, applied = fix_until_clean(spec, max_rounds=args.rounds)
    report.spec.save(output)
    doc = report.to_json()
    doc["applied"] = applied
    doc["fixed_spec"] = report.spec.to_dict()
    if args.json:
        _print_json(doc, args)
    else:
        for step in applied:
            print(f"round {step['round']}: {step['code']} -> applied {step['fix']}")
        print(format_diagnosis(doc))
        verdict = ("NOT fixed" if not report.ok else "fixed" if applied
                   else "nothing to fix, the run is clean")
        print(f"\n{verdict}; spec written to {args.output}")
    return 0 if report.ok else 1


def cmd_bench(args) -> int:
    from .core.bench import benchmark, format_table

    if (args.warmup < 0 or args.min_iterations < 1 or args.min_seconds < 0
            or args.min_rounds < 1):
        raise InputError("bench: --warmup >= 0, --min-iterations >= 1, --min-seconds >= 0, "
                         "--min-rounds >= 1")
    result = benchmark(_load_spec(args.spec, trust=args.trust), variants=args.variants,
                       warmup=args.warmup, min_iterations=args.min_iterations,
                       min_seconds=args.min_seconds, min_rounds=args.min_rounds)
    _emit(result.to_json(), args, format_table)
    return 0


def cmd_drift(args) -> int:
    """0 within tolerance; 1 precision-drift, overflow, or a variant that cannot run."""
    from .core.drift import drift, format_drift

    result = drift(_load_spec(args.spec, trust=args.trust), variant=args.variant)
    _emit(result.to_json(), args, format_drift)
    return 0 if result.ok else 1


def cmd_export(args) -> int:
    from .core.export import export_script

    spec = _load_spec(args.spec)  # export never runs the preprocess: no trust needed
    export_script(spec, _output(args, args.spec, spec, _is_script))
    print(f"wrote {args.output}")
    return 0


def cmd_report(args) -> int:
    """Exit like diagnose (1 when the run has error findings); the report is written either way."""
    from .core.diagnosis import diagnose
    from .core.html_report import render_report
    from .core.spec import write_text_atomic

    spec = _load_spec(args.spec, trust=args.trust)
    output = _output(args, args.spec, spec, _is_report)
    report = diagnose(spec)
    bench = None
    if args.bench:
        from .core.bench import benchmark

        bench = benchmark(spec, variants=args.variants).to_json()
    write_text_atomic(output, render_report(report.to_json(), bench))
    print(f"wrote {args.output}")
    return 0 if report.ok else 1


def cmd_inspect(args) -> int:
    from .core import dtypes
    from .core.inspect import inspect_model

    dtype = dtypes.normalize(args.dtype, "--dtype") if args.dtype else None
    if args.model.startswith("demo:") or (os.path.isfile(args.model) and args.model.lower().endswith(
            (".json", ".toml", ".fp16studio"))):
        raise InputError(f"inspect takes a model (a save_pretrained folder or a Hub id), not a spec: "
                         f"{args.model}; its \"model\" is what to inspect")
    doc = inspect_model(args.model, dtype=dtype, trust_remote_code=args.trust_remote_code,
                        base_dir=os.getcwd())
    if args.json:
        _print_json(doc, args)
        return 0
    print(f"{doc['model']}: {doc['architecture']}, {doc['parameters']:,} parameters in "
          f"{doc['tensors']} tensors")
    for name, size in doc["memory_bytes"].items():
        mark = "  <-" if name == dtype else ""
        print(f"  {name:>9}: {format_bytes(size)}{mark}")
    if doc["checkpoint_dtypes"]:
        print("  checkpoint: " + ", ".join(f"{n} {d}" for d, n in doc["checkpoint_dtypes"].items()))
    largest = doc["largest_layer"]
    print(f"  largest layer: {largest['name']} ({format_bytes(largest['bytes'])})")
    if doc["keep_fp32_modules"]:
        print("  kept in float32 by the model: " + ", ".join(doc["keep_fp32_modules"]))
    return 0


def cmd_demo(args) -> int:
    from .core.demo import DEMOS, write_demo

    paths = write_demo(args.dir)
    print(f"wrote the demo to {args.dir}:")
    for path in paths:
        print(f"  {path}  ({DEMOS[path.stem]})")
    print(f"try: fp16studio diagnose {paths[0]}")
    return 0


def cmd_trace(args) -> int:
    """The script's own lines pass through as they come (to stderr with --json), then the result."""
    from .core.script_trace import trace_script

    def output(stream, line):
        target = sys.stderr if args.json or stream == "stderr" else sys.stdout
        print(line, file=target, flush=True)

    # What is piped in reaches the script, as with `python SCRIPT`; a terminal does not (the
    # script runs in a session of its own, where reading the terminal would stop it).
    piped = sys.stdin if sys.stdin is not None and not sys.stdin.isatty() else None
    result = trace_script(args.script, args.script_args, timeout=args.script_timeout,
                          output=output, stdin=piped)
    _emit(result.to_json(), args, format_trace)
    return 0 if result.ok else 1


def format_trace(doc: dict) -> str:
    """Human-readable trace: the verdict, the models that ran, each finding at its script line."""
    name = os.path.basename(doc["script"])
    # "unknown": the script's process ended before it said where its models ran.
    where = f" on {doc['device']}" if doc["device"] != "unknown" else ""
    lines = ["", f"{name}{where}: {'ok' if doc['ok'] else 'problems found'}"]
    for model in doc["models"]:
        lines.append(f"  model {model['name']} ({model['class']}): {model['calls']} call(s)")
    error = doc["error"]
    if error:
        where = f" in {error['module']}" if error.get("module") else ""
        lines.append(f"  failed{where}{_at_line(error.get('source'))}: {error['message']}")
    if doc["output"]:
        out = doc["output"]
        lines.append(f"  output {out['name']}: {out['dtype']} {out['shape']}"
                     + ("" if out.get("finite", True) else ", NOT finite"))
    lines.extend(f"  note: {note}" for note in doc["notes"])
    for finding in doc["findings"]:
        lines += finding_lines(finding, _at_line(finding["source"]))
    if doc["spec"]:
        from .core.spec import PipelineSpec

        defaults = PipelineSpec(model="", dataset="").to_dict()
        said = ", ".join(f"{key}={value}" for key, value in doc["spec"].items()
                         if value != defaults[key])
        lines.append("")
        lines.append(f"recovered pipeline spec: {said}")
        lines.append("  (the \"spec\" of --json is a spec file: fp16studio fix takes over from it)")
    return "\n".join(lines)


def _at_line(source) -> str:
    return f" ({os.path.basename(source['file'])}:{source['line']})" if source else ""


COMMANDS = {"diagnose": cmd_diagnose, "fix": cmd_fix, "bench": cmd_bench, "drift": cmd_drift,
            "export": cmd_export, "report": cmd_report, "inspect": cmd_inspect, "demo": cmd_demo,
            "trace": cmd_trace}


def _print_json(doc, args):
    args.json_doc = doc  # printed once the command is done and stdout is ours again


def _emit(doc: dict, args, formatter) -> None:
    """The command's --json document, or its human-readable form."""
    if args.json:
        _print_json(doc, args)
    else:
        print(formatter(doc))


def format_diagnosis(doc: dict) -> str:
    """Human-readable diagnosis: the verdict, then each finding with its fixes."""
    lines = []
    error = doc["error"]
    verdict = "ok" if doc["ok"] else "problems found"
    lines.append(f"{doc['spec']['model']} on {doc['device']}: {verdict}")
    if error:
        where = f" in {error['module']}" if error.get("module") else ""
        lines.append(f"  the pipeline failed at {error['stage']}{where}: {error['message']}")
    if doc["output"]:
        out = doc["output"]
        finite = "" if out.get("finite", True) else ", NOT finite"
        lines.append(f"  output {out['name']}: {out['dtype']} {out['shape']}{finite}")
    for finding in doc["findings"]:
        lines += finding_lines(finding)
    inv = doc["inventory"]
    if inv["tensors"]:
        by_dtype = ", ".join(f"{n} {d}" for d, n in sorted(inv["dtypes"].items()))
        lines.append("")
        lines.append(f"inventory: {inv['parameters']:,} parameters, {inv['tensors']} tensors, "
                     f"{format_bytes(inv['bytes'])} ({by_dtype})")
    return "\n".join(lines)
