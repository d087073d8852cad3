"""What one diagnosis of a 21k-tensor model costs to encode and decode, by each way it can
travel: pickle (how the engine's frames went until now), the JSON text alone (json.dumps/loads
of a document already made: the floor of any JSON codec), the hand-written to_json the tree
had before the codec (encode only), fp16studio's derived codec (core/common/codec.py), and
pydantic v2's TypeAdapter over the same dataclasses. All in one run, reported as ratios to
pickle, so the machine's speed cancels out.

The diagnosis is made without a model: 700 modules of 30 tensors each (the shape of the
bert-wide benchmark model's ~21k-tensor tree), 20 findings with fixes, the usual documents.

    python benchmarks/codec_cost.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import pickle
import statistics
import time

from fp16studio.core.diagnostics.findings import CodeEdit, Finding, Fix
from fp16studio.core.diagnostics.report import Diagnosis
from fp16studio.core.diagnostics.tree import TensorNode
from fp16studio.core.spec.value import PipelineSpec

MODULES, TENSORS_PER_MODULE = 700, 30


def diagnosis() -> Diagnosis:
    root = TensorNode("model", "", "group")
    for m in range(MODULES):
        module = root.add(TensorNode(f"layer{m}", f"encoder.layer.{m}", "module"))
        for t in range(TENSORS_PER_MODULE):
            kind = ("parameter", "buffer", "activation")[t % 3]
            module.add(TensorNode(f"t{t}", f"encoder.layer.{m}.t{t}", kind, shape=(32, 32),
                                  dtype="float16", device="cpu", bytes=2048, absmax=1.5 + t,
                                  nonfinite=0, status="ok"))
    fix = Fix("model-float32", "Keep the model in float32", {"model_dtype": "float32"},
              "float32 holds these values", CodeEdit("model = model.float()", "replace",
                                                     {"file": "train.py", "line": 12}))
    findings = [Finding("overflow", "error", f"encoder.layer.{i}", "inf appears here",
                        {"absmax": 7e4, "dtype": "float16"}, (fix,), {"file": "train.py", "line": i})
                for i in range(20)]
    return Diagnosis(spec=PipelineSpec(model="m", dataset="synthetic"), device="cpu",
                     findings=findings, tree=root, timings={"forward": 1.0},
                     environment={"torch": "2.13"},
                     output={"name": "logits", "dtype": "float16", "shape": [4, 2]})


def hand_written(node: TensorNode) -> dict:
    """TensorNode.to_json as it was written by hand before the codec."""
    out = {"name": node.name, "path": node.path, "kind": node.kind}
    if node.is_tensor:
        out.update(shape=list(node.shape or ()), dtype=node.dtype, device=node.device,
                   bytes=node.bytes, absmax=node.absmax, nonfinite=node.nonfinite)
    out["status"] = node.status
    if node.children:
        out["children"] = [hand_written(child) for child in node.children]
    return out


def timed(function, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    d = diagnosis()
    tensors = sum(1 for node in d.tree.walk() if node.is_tensor)
    pickled = pickle.dumps(d, protocol=5)
    doc = d.to_json(full=True)
    text = json.dumps(doc)
    assert Diagnosis.from_json(json.loads(text)) == d
    rows = {
        "pickle": (lambda: pickle.dumps(d, protocol=5), lambda: pickle.loads(pickled)),
        "JSON text only": (lambda: json.dumps(doc), lambda: json.loads(text)),
        "hand-written tree + JSON": (lambda: json.dumps(hand_written(d.tree)), None),
        "codec + JSON": (lambda: json.dumps(d.to_json(full=True)),
                         lambda: Diagnosis.from_json(json.loads(text))),
    }
    try:
        from pydantic import TypeAdapter

        adapter = TypeAdapter(TensorNode)
        tree_text = adapter.dump_json(d.tree)
        rows["pydantic (tree only)"] = (lambda: adapter.dump_json(d.tree),
                                        lambda: adapter.validate_json(tree_text))
    except Exception as exc:  # noqa: BLE001 - a benchmark row, said in its place
        print(f"pydantic: not measured ({type(exc).__name__}: {exc})")
    print(f"a diagnosis of {tensors} tensors, {len(d.findings)} findings: pickle "
          f"{len(pickled) / 1e6:.1f} MB, JSON {len(text) / 1e6:.1f} MB; median of {args.repeat}")
    # Interleaved rounds: a load that comes and goes weighs on every row alike.
    times = {name: ([], []) for name in rows}
    for _ in range(args.repeat):
        for name, (encode, decode) in rows.items():
            times[name][0].append(timed(encode, 1))
            times[name][1].append(timed(decode, 1) if decode else None)
    base_encode, base_decode = (statistics.median(t) for t in times["pickle"])
    for name, (encodes, decodes) in times.items():
        enc = statistics.median(encodes)
        dec = statistics.median(decodes) if decodes[0] is not None else None
        dec_text = f"decode {dec:7.1f} ms ({dec / base_decode:5.1f}x)" if dec else "decode      -"
        print(f"{name:>26}: encode {enc:7.1f} ms ({enc / base_encode:5.1f}x)  {dec_text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
