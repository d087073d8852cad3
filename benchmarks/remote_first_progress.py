"""The engine on a box over ssh against the engine on this machine, in one run, through a real
sshd on loopback (tests/remote_box.py): from a job's start on a fresh engine to its first
progress line (the engine's start, plus ssh's connection for the box), and a 21k-tensor
diagnosis (benchmarks/frame_cost.py) sent back by a warm engine: time and bytes, and the bytes
zlib would make of it (what `ssh -C` would send).

    python benchmarks/remote_first_progress.py [--rounds 5] [--tensors 21000]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import zlib
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parent / "tests"), str(HERE)]

from fp16studio.core.diagnostics.report import Diagnosis  # noqa: E402  (after the path)


def says_progress(progress):
    """A job that says one progress line and returns at once."""
    progress("model", "loading")


def big_result(tensors: int) -> Diagnosis:   # its type: how the result travels
    from frame_cost import diagnosis

    return diagnosis(tensors)


def seconds_to_first_progress(make_client) -> float:
    from fp16studio.core.common.errors import CancelToken
    from fp16studio.engine import messages as m

    client = make_client()
    start = time.perf_counter()
    seen = []

    def on_event(event):
        if isinstance(event, m.Progress) and event.stage == "model" and not seen:
            seen.append(time.perf_counter() - start)

    ending = client.run("remote_first_progress:says_progress", (), {}, CancelToken(), on_event)
    assert isinstance(ending, m.Result), ending
    client.close(grace_s=5)
    return seen[0]


def result_seconds(client, tensors: int) -> float:
    from fp16studio.core.common.errors import CancelToken

    start = time.perf_counter()
    ending = client.run("remote_first_progress:big_result", (tensors,), {}, CancelToken(),
                        lambda event: None)
    assert len(list(ending.value.tree.walk())) > tensors, ending
    return time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--tensors", type=int, default=21000)
    args = parser.parse_args(argv)

    from remote_box import running_box

    from fp16studio.core.common.frames import encode_frame
    from fp16studio.engine import messages as m
    from fp16studio.engine.client import EngineClient, local_engine
    from fp16studio.engine.transport import ssh_engine
    from frame_cost import diagnosis

    with tempfile.TemporaryDirectory() as folder, running_box(Path(folder)) as box:
        os.environ["FP16STUDIO_SSH_COMMAND"] = box.ssh_command
        python = box.python.replace("PYTHONPATH=", f"PYTHONPATH={HERE}{os.pathsep}", 1)
        command, env = local_engine()
        env["PYTHONPATH"] = os.pathsep.join([str(HERE), env["PYTHONPATH"]])
        engines = {"local": lambda: EngineClient(engine=(command, env)),
                   "ssh": lambda: EngineClient(engine=ssh_engine("box", python))}
        first = {name: statistics.median(seconds_to_first_progress(make)
                                         for _ in range(args.rounds))
                 for name, make in engines.items()}
        sent = {}
        for name, make in engines.items():
            client = make()
            result_seconds(client, 10)   # warm: started, its imports done
            sent[name] = statistics.median(result_seconds(client, args.tensors)
                                           for _ in range(args.rounds))
            client.close(grace_s=5)
    frame = encode_frame(m.to_frame(m.Result(1, diagnosis(args.tensors).to_json(full=True))))
    print(f"median of {args.rounds}")
    print(f"{'':8}{'first progress s':>18}{f'{args.tensors} tensors s':>20}")
    for name in engines:
        print(f"{name:8}{first[name]:>18.2f}{sent[name]:>20.2f}")
    print(f"{'ratio':8}{first['ssh'] / first['local']:>18.2f}{sent['ssh'] / sent['local']:>20.2f}"
          "   (ssh / local)")
    print(f"the result's frame: {len(frame)} bytes, {len(zlib.compress(frame, 6))} compressed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
