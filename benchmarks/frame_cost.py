"""What a result costs to cross a process boundary as a JSON frame of the codec's documents,
against the pickle it replaced, in one run: a diagnosis with a 21k-tensor tree (the size of
MiniLM's traced pass, benchmarks/_models.py), sent as the engine's diagnose task returns it
(tasks.Diagnosed) inside a Result message.

Encode: the result to bytes. Decode: the bytes to the result, the tree's index built where it
arrives (session_state.arrived; after pickle.loads too). Each figure is the median of ROUNDS;
the ratios are frame / pickle.

    python benchmarks/frame_cost.py [--tensors 21000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import io
import pickle
import statistics
import time


def diagnosis(tensors: int):
    """A Diagnosis shaped as a transformer's: modules of a parameter, buffer and activation mix."""
    from fp16studio.core.diagnostics.findings import CodeEdit, Finding, Fix
    from fp16studio.core.diagnostics.report import Diagnosis
    from fp16studio.core.diagnostics.tree import TensorNode
    from fp16studio.core.spec.value import PipelineSpec

    root = TensorNode("pipeline", "", "group")
    model = root.add(TensorNode("BertModel", "model", "module"))
    made, layer = 0, 0
    while made < tensors:
        module = model.add(TensorNode("Linear", f"model.layer.{layer}", "module"))
        for i, kind in enumerate(("parameter", "parameter", "activation", "gradient") * 5):
            module.add(TensorNode(f"t{i}", f"model.layer.{layer}.t{i}", kind, shape=(384, 384),
                                  dtype="float16", device="cpu", bytes=294912,
                                  absmax=12.5 + i, status="ok"))
            made += 1
        layer += 1
    fix = Fix("keep-fp32", "Keep LayerNorm in float32", {"keep_fp32": ["LayerNorm"]},
              "LayerNorm's variance overflows float16", CodeEdit("model.float()", "add"))
    findings = [Finding("overflow", "error", f"model.layer.{i}", "inf in the output",
                        {"absmax": 7.1e4, "dtype": "float16"}, (fix,)) for i in range(20)]
    return Diagnosis(spec=PipelineSpec(model="demo:tiny", dataset="demo:tiny"), device="cpu",
                     findings=findings, tree=root, timings={"forward": 1.2},
                     environment={"torch": "2.13"})


def median_seconds(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, default=21000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args(argv)

    from fp16studio.core.common.frames import encode_frame, read_body
    from fp16studio.core.common.gc_pause import gc_paused
    from fp16studio.core.diagnostics.tree_index import TreeIndex
    from fp16studio.engine import messages as m
    from fp16studio.engine.client import event_of
    from fp16studio.engine.tasks import Diagnosed, types_of
    from fp16studio.session_state import arrived

    result = Diagnosed(diagnosis(args.tensors))
    types = types_of("diagnose")

    def send(value):
        return encode_frame(m.to_frame(m.Result(1, types.encode_result(value))))

    def receive(frame):   # as the window's worker does: the collector paused meanwhile
        with gc_paused():
            came = types.decode_result(event_of(read_body(io.BytesIO(frame))).value)
            return arrived(came.diagnosis, came.gpu_memory)

    def unpickle(data):
        with gc_paused():
            came = pickle.loads(data).value
            return came, TreeIndex(came.diagnosis.tree)

    message = m.Result(1, result)
    pickled = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    frame = send(result)
    diagnosis_there, index, _ = receive(frame)
    assert diagnosis_there.tree == result.diagnosis.tree and index.root is diagnosis_there.tree
    rows = {
        "pickle": (len(pickled), median_seconds(lambda: pickle.dumps(message, protocol=5), args.rounds),
                   median_seconds(lambda: unpickle(pickled), args.rounds)),
        "frame": (len(frame), median_seconds(lambda: send(result), args.rounds),
                  median_seconds(lambda: receive(frame), args.rounds)),
    }
    print(f"{args.tensors} tensors, median of {args.rounds}")
    print(f"{'':8}{'bytes':>12}{'encode ms':>12}{'decode ms':>12}")
    for name, (size, encode, decode) in rows.items():
        print(f"{name:8}{size:>12}{encode * 1e3:>12.1f}{decode * 1e3:>12.1f}")
    (ps, pe, pd), (fs, fe, fd) = rows["pickle"], rows["frame"]
    print(f"{'ratio':8}{fs / ps:>12.2f}{fe / pe:>12.2f}{fd / pd:>12.2f}   (frame / pickle)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
