"""The `fp16studio` command: the same engine as the window, for remote GPU boxes and CI.

Exit codes (CONTRACT §3): 0 fine, 1 error findings / not fixed, 2 bad input (one line on stderr).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
import warnings

from . import __version__
from .core.errors import InputError
from .core.units import format_bytes

BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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

    fix = sub.add_parser("fix", help="apply first fixes and re-run until no error remains")
    fix.add_argument("spec", metavar="SPEC")
    fix.add_argument("-o", "--output", required=True, metavar="FIXED", help="fixed spec to write")
    fix.add_argument("--rounds", type=int, default=5, help="most fixes to apply (default 5)")
    fix.add_argument("--json", action="store_true")

    bench = sub.add_parser("bench", help="measure each precision variant on the same batch")
    bench.add_argument("spec", metavar="SPEC")
    bench.add_argument("--variants", metavar="V,...",
                       help="comma-separated: float32,float16,bfloat16,autocast-float16,"
                            "autocast-bfloat16 (default: all)")
    bench.add_argument("--warmup", type=int, default=3, help="untimed calls first, at least 1 (default 3)")
    bench.add_argument("--min-iterations", type=int, default=10,
                       help="timed calls per variant, at least (default 10)")
    bench.add_argument("--min-seconds", type=float, default=1.0,
                       help="seconds per variant, at least (default 1.0)")
    bench.add_argument("--json", action="store_true")

    export = sub.add_parser("export", help="write a runnable script of the pipeline")
    export.add_argument("spec", metavar="SPEC")
    export.add_argument("-o", "--output", required=True, metavar="SCRIPT.py")

    report = sub.add_parser("report", help="diagnose (and optionally bench), write an HTML report")
    report.add_argument("spec", metavar="SPEC")
    report.add_argument("-o", "--output", required=True, metavar="REPORT.html")
    report.add_argument("--bench", action="store_true", help="also measure the precision variants")
    report.add_argument("--variants", metavar="V,...", help="with --bench: the variants to measure")

    insp = sub.add_parser("inspect", help="tensor inventory and memory per dtype from the config")
    insp.add_argument("model", metavar="MODEL", help="local folder, config.json or Hub id")
    insp.add_argument("--dtype", help="dtype to size the model at (float32, float16, bfloat16)")
    insp.add_argument("--trust-remote-code", action="store_true")
    insp.add_argument("--json", action="store_true")

    demo = sub.add_parser("demo", help="write the built-in demo model, dataset and specs to DIR")
    demo.add_argument("dir", nargs="?", default="fp16studio-demo", metavar="DIR")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.install_desktop:
        return _install_desktop()
    if args.command in (None, "gui"):
        return _gui(getattr(args, "spec", None))
    _quiet_libraries()
    try:
        return COMMANDS[args.command](args)
    except InputError as exc:
        print(f"fp16studio: {exc}", file=sys.stderr)
        return BAD_INPUT
    except KeyboardInterrupt:
        print("fp16studio: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug of ours: one line, the traceback on request
        if os.environ.get("FP16STUDIO_DEBUG"):
            raise
        print(f"fp16studio: internal error: {type(exc).__name__}: {exc} "
              "(set FP16STUDIO_DEBUG=1 for the traceback)", file=sys.stderr)
        return 3


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


def _load_spec(text: str):
    from .core.spec import PipelineSpec

    return PipelineSpec.load(text)


def cmd_diagnose(args) -> int:
    from .core.diagnosis import diagnose

    report = diagnose(_load_spec(args.spec))
    doc = report.to_json()
    if args.json:
        _print_json(doc)
    else:
        print(format_diagnosis(doc))
    return 0 if report.ok else 1


def cmd_fix(args) -> int:
    from .core.fixing import fix_until_clean

    if args.rounds < 1:
        raise InputError("--rounds must be at least 1")
    report, applied = fix_until_clean(_load_spec(args.spec), max_rounds=args.rounds)
    report.spec.save(args.output)
    doc = report.to_json()
    doc["applied"] = applied
    doc["fixed_spec"] = report.spec.to_dict()
    if args.json:
        _print_json(doc)
    else:
        for step in applied:
            print(f"round {step['round']}: {step['code']} -> applied {step['fix']}")
        print(format_diagnosis(doc))
        verdict = "fixed" if report.ok else "NOT fixed"
        print(f"\n{verdict}; spec written to {args.output}")
    return 0 if report.ok else 1


def cmd_bench(args) -> int:
    from .core.bench import benchmark, format_table

    # One warm-up call at least: the first call pays for lazy initialisation and is never timed.
    if args.warmup < 1 or args.min_iterations < 1 or args.min_seconds < 0:
        raise InputError("bench: --warmup >= 1, --min-iterations >= 1, --min-seconds >= 0")
    result = benchmark(_load_spec(args.spec), variants=args.variants, warmup=args.warmup,
                       min_iterations=args.min_iterations, min_seconds=args.min_seconds)
    doc = result.to_json()
    if args.json:
        _print_json(doc)
    else:
        print(format_table(doc))
    return 0


def cmd_export(args) -> int:
    from .core.export import export_script

    export_script(_load_spec(args.spec), args.output)
    print(f"wrote {args.output}")
    return 0


def cmd_report(args) -> int:
    """Exit like diagnose (1 when the run has error findings); the report is written either way."""
    from pathlib import Path

    from .core.diagnosis import diagnose
    from .core.html_report import render_report
    from .core.spec import write_text_atomic

    spec = _load_spec(args.spec)
    report = diagnose(spec)
    bench = None
    if args.bench:
        from .core.bench import benchmark

        bench = benchmark(spec, variants=args.variants).to_json()
    write_text_atomic(Path(args.output), render_report(report.to_json(), bench))
    print(f"wrote {args.output}")
    return 0 if report.ok else 1


def cmd_inspect(args) -> int:
    from .core import dtypes
    from .core.inspect import inspect_model

    dtype = dtypes.normalize(args.dtype, "--dtype") if args.dtype else None
    doc = inspect_model(args.model, dtype=dtype, trust_remote_code=args.trust_remote_code,
                        base_dir=os.getcwd())
    if args.json:
        _print_json(doc)
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


COMMANDS = {"diagnose": cmd_diagnose, "fix": cmd_fix, "bench": cmd_bench, "export": cmd_export,
            "report": cmd_report, "inspect": cmd_inspect, "demo": cmd_demo}


def _print_json(doc):
    json.dump(doc, sys.stdout, indent=2, default=str)
    sys.stdout.write("\n")




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
        lines.append("")
        lines.append(f"{finding['severity'].upper():8}{finding['code']}  at {finding['location']}")
        lines.extend(textwrap.wrap(finding["message"], 96, initial_indent="        ",
                                   subsequent_indent="        "))
        for i, fix in enumerate(finding["fixes"]):
            lines.append(f"        {'fix' if i == 0 else 'or '}: {fix['title']}  [{fix['id']}]")
    inv = doc["inventory"]
    if inv["tensors"]:
        by_dtype = ", ".join(f"{n} {d}" for d, n in sorted(inv["dtypes"].items()))
        lines.append("")
        lines.append(f"inventory: {inv['parameters']:,} parameters, {inv['tensors']} tensors, "
                     f"{format_bytes(inv['bytes'])} ({by_dtype})")
    return "\n".join(lines)
