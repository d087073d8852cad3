"""The command line's grammar (CONTRACT §3): commands, their options, and the script's own
arguments after `--`."""

from __future__ import annotations

import argparse

from .. import __version__
from .process import BAD_INPUT
from .remote import HOST_COMMANDS


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
    parser.add_argument("--version", action="version", version=f"fp16studio {__version__}",
                        help="print fp16studio's version and exit")
    parser.add_argument("--install-desktop", action="store_true",
                        help="add fp16studio to this user's application menu, then exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    gui = sub.add_parser("gui", help="open the desktop app (the demo without SPEC)")
    gui.add_argument("spec", nargs="?", metavar="SPEC",
                     help="a spec file (.json or .toml), a saved session (.fp16studio) or "
                          "demo:NAME to open (default: the built-in demo)")

    diag = sub.add_parser("diagnose", help="load, run one traced forward pass, print findings")
    _spec(diag)
    diag.add_argument("--json", action="store_true", help="print one JSON document")
    _run_options(diag)

    fix = sub.add_parser("fix", help="apply first fixes and re-run until no error remains")
    _spec(fix)
    fix.add_argument("-o", "--output", required=True, metavar="FIXED", help="fixed spec to write")
    fix.add_argument("--rounds", type=int, default=5, help="most fixes to apply (default 5)")
    fix.add_argument("--json", action="store_true", help="print one JSON document")
    _run_options(fix)
    _force_option(fix)

    bench = sub.add_parser("bench", help="measure each precision variant on the same batch")
    _spec(bench)
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
    bench.add_argument("--json", action="store_true", help="print one JSON document")
    _run_options(bench)

    drift = sub.add_parser("drift", help="float32 against a half variant, module by module")
    _spec(drift)
    drift.add_argument("--variant", metavar="V",
                       help="float16, bfloat16, autocast-float16 or autocast-bfloat16 (default: "
                            "the spec's own half precision, else float16)")
    drift.add_argument("--json", action="store_true", help="print one JSON document")
    _run_options(drift)

    fp8 = sub.add_parser("fp8", help="which Linear layers can go to FP8, and what each would "
                                     "lose (SQNR against bfloat16) on your batch")
    _spec(fp8)
    fp8.add_argument("--recipe", default="tensorwise", metavar="R",
                     help="torchao's float8 recipe: tensorwise or rowwise (default: tensorwise)")
    fp8.add_argument("--export", "-o", dest="output", metavar="SCRIPT.py",
                     help="also write a script that converts exactly the plan's layers")
    fp8.add_argument("--json", action="store_true", help="print one JSON document")
    _run_options(fp8)
    _force_option(fp8)

    export = sub.add_parser("export", help="write a runnable script of the pipeline")
    _spec(export)
    export.add_argument("-o", "--output", required=True, metavar="SCRIPT.py",
                        help="the Python script to write")
    _force_option(export)

    report = sub.add_parser("report", help="diagnose (and optionally bench), write an HTML report")
    _spec(report)
    report.add_argument("-o", "--output", required=True, metavar="REPORT.html",
                        help="the HTML report to write")
    report.add_argument("--bench", action="store_true", help="also measure the precision variants")
    report.add_argument("--variants", metavar="V,...", help="with --bench: the variants to measure")
    _run_options(report)
    _force_option(report)

    insp = sub.add_parser("inspect", help="tensor inventory and memory per dtype from the config")
    insp.add_argument("model", metavar="MODEL", help="local folder, config.json or Hub id")
    insp.add_argument("--dtype", help="dtype to size the model at (float32, float16, bfloat16)")
    insp.add_argument("--trust-remote-code", action="store_true",
                      help="read a config whose model class is the repository's own code")
    insp.add_argument("--json", action="store_true", help="print one JSON document")

    trace = sub.add_parser("trace", help="run your own script with the tracer on and diagnose "
                                         "the models it runs",
                           usage="fp16studio trace SCRIPT [--json] [--timeout S] [--steps N] "
                                 "[--python PATH] [--apply FIX_ID[:LINE] -o FIXED.py] "
                                 "[--launch LAUNCHER [--rank-wait S]] [-- ARGS...]",
                           epilog="Everything after -- is passed to the script as its arguments; "
                                  "options go before --.")
    trace.add_argument("script", metavar="SCRIPT", help="a Python script, or demo:NAME")
    trace.add_argument("--json", action="store_true",
                       help="print one JSON document (the script's own output goes to stderr)")
    # Its own dest: the script's time limit ends the script and diagnoses what ran, where the
    # other commands' --timeout ends fp16studio itself.
    trace.add_argument("--timeout", type=float, metavar="S", dest="script_timeout",
                       help="stop the script after S seconds and diagnose what ran")
    trace.add_argument("--steps", type=_steps, default=2, metavar="N",
                       help="how many training steps to follow after the first forward pass "
                            "(default 2; 0: the forward pass only)")
    trace.add_argument("--apply", action="append", metavar="FIX_ID[:LINE]",
                       help="write a copy of the script with this fix applied (repeatable; "
                            ":LINE picks the finding at that line); needs -o")
    trace.add_argument("-o", "--output", metavar="FIXED.py",
                       help="where --apply writes the fixed copy (never the script itself)")
    trace.add_argument("--force", action="store_true",
                       help="with --apply: replace FIXED.py even if it is not a .py file")
    trace.add_argument("--python", metavar="PATH",
                       help="run the script under this Python interpreter, with its own packages "
                            "(it needs torch, transformers and datasets); default: the Python "
                            "fp16studio runs in, which in the standalone app is the bundled one")
    trace.add_argument("--launch", metavar="LAUNCHER",
                       help='trace every rank of a distributed run, started by your own launcher '
                            'and its options, as in --launch "torchrun --nproc-per-node 4" or '
                            '--launch "accelerate launch --num_processes 2"')
    trace.add_argument("--rank-wait", type=float, metavar="S", default=None,
                       help="with --launch: once a rank is over, how long the others may take "
                            "before they are named as hung and stopped (default 60)")

    schema = sub.add_parser("schema", help="print the JSON Schema of a --json document or file")
    schema.add_argument("name", metavar="NAME",
                        help="diagnose, fix, trace, trace-launch, bench, drift, fp8, inspect, session "
                             "or spec")
    engine = sub.add_parser("engine", help="serve the window's engine protocol (over ssh: the "
                                           "window or --host on another machine drives it)")
    serving = engine.add_mutually_exclusive_group(required=True)
    serving.add_argument("--stdio", action="store_true", help="typed JSON frames on stdin and stdout")
    serving.add_argument("--attach", metavar="ID",
                         help="the same, with run ID's engine, which outlives the connection "
                              "(started by the first attach)")
    serving.add_argument("--serve-run", metavar="ID", help=argparse.SUPPRESS)   # that engine
    engine.add_argument("--from", dest="start_at", type=int, default=0, metavar="N",
                        help="with --attach: replay the run's events from the Nth (default 0)")

    install = sub.add_parser("remote-install", help="install this exact fp16studio on HOST "
                                                    "(its wheel sent through your ssh)")
    install.add_argument("target", metavar="HOST", help="a host your ssh reaches")
    install.add_argument("--remote-python", metavar="PYTHON",
                         help="the Python there to install into (default python3; a venv's python)")
    install.add_argument("--no-deps", action="store_true",
                         help="install fp16studio alone (the box has its dependencies, or no index)")

    for name in HOST_COMMANDS:
        _host_options(sub.choices[name])

    demo = sub.add_parser("demo", help="write the built-in demo model, dataset and specs to DIR")
    demo.add_argument("dir", nargs="?", default="fp16studio-demo", metavar="DIR",
                      help="the folder to write them to (default: fp16studio-demo)")
    return parser


def _spec(parser):
    parser.add_argument("spec", metavar="SPEC",
                        help="a spec file (.json or .toml), a saved session (.fp16studio) or "
                             "demo:NAME")


def _run_options(parser):
    """Options of the commands that run a pipeline (and so, maybe, the user's preprocess)."""
    parser.add_argument("--trust", action="store_true",
                        help="run the spec's preprocess code: you read it and trust it "
                             "(remembered until the spec or its code changes)")
    parser.add_argument("--timeout", type=float, metavar="S",
                        help="give up after S seconds (exit 2): a pipeline that hangs")


def _host_options(parser):
    parser.add_argument("--host", metavar="HOST",
                        help="run it on HOST through your ssh (its config, keys and agent) and "
                             "print the result here; paths are HOST's (trace sends a local script)")
    parser.add_argument("--remote-python", metavar="PYTHON",
                        help="with --host: the Python there that has fp16studio (default python3; "
                             "a venv's python, or a command line such as 'env VAR=x python3')")


def _force_option(parser):
    parser.add_argument("--force", action="store_true",
                        help="replace an existing output file of another kind (kept as .bak)")


def parse(argv: list[str]) -> argparse.Namespace:
    """The command line, `trace`'s script arguments (after `--`) in `script_args`."""
    argv, script_args = split_script_args(argv)
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        hint = ("; the script's own arguments go after --: fp16studio trace SCRIPT -- ARGS"
                if args.command == "trace" else "")
        parser.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    if getattr(args, "remote_python", None) and not getattr(args, "host", None) and (
            args.command != "remote-install"):
        parser.error("--remote-python goes with --host HOST")
    args.script_args = script_args
    return args


def split_script_args(argv: list[str]) -> tuple[list[str], list[str]]:
    """`trace SCRIPT [options] -- ARGS`: what follows the first -- belongs to the script."""
    if argv[:1] == ["trace"] and "--" in argv:
        cut = argv.index("--")
        return argv[:cut], argv[cut + 1:]
    return argv, []


def _steps(text: str) -> int:
    try:
        steps = int(text)
    except ValueError:
        steps = -1
    if steps < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number of steps (0 or more), got {text!r}")
    return steps
