"""Fuzzing the spec and session readers (issue 9): random, mutated and truncated documents are
read as a spec or refused with an InputError (exit 2), never another exception (exit 3), never a
hang. Seeded, so a failure reproduces; each document's text is in the assertion message."""

import json
import random
import signal
from contextlib import contextmanager

import pytest

from fp16studio.cli import main
from fp16studio.core import InputError
from fp16studio.core.spec.documents import load_spec
from fp16studio.core.spec.session import open_session
from fp16studio.core.spec.value import KEYS

SEED = 20261122
DOCUMENTS = 400
# The whole loop must finish well inside this: a reader that hangs fails the test.
LOOP_LIMIT_S = 120


@contextmanager
def bounded(seconds):
    def hung(signum, frame):
        raise AssertionError(f"the reader hung for {seconds} s")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _random_value(rng, depth=0):
    kinds = ["str", "int", "float", "bool", "null", "list", "dict", "path", "dtype", "huge"]
    kind = rng.choice(kinds if depth < 3 else kinds[:5])
    if kind == "str":
        return "".join(rng.choice("ab:/.\\ \u00e9\u4e2d\x00\n") for _ in range(rng.randint(0, 12)))
    if kind == "int":
        return rng.choice([0, -1, 1, 2**31, -(2**63), 10**30])
    if kind == "float":
        return rng.choice([0.5, -1e308, 1e-300, float("inf")])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "list":
        return [_random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if kind == "dict":
        return {rng.choice(["text", "image", "label", "id", "x"]): _random_value(rng, depth + 1)
                for _ in range(rng.randint(0, 3))}
    if kind == "path":
        return rng.choice(["/", "/dev/zero", "../../etc/passwd", "~", "a" * 5000, "pre.py:fn",
                           "/usr/lib/python3/subprocess.py:run", "demo:healthy", "synthetic"])
    if kind == "dtype":
        return rng.choice(["fp16", "half", "bfloat16", "float64", "int8", "auto", "cuda:99"])
    return "x" * rng.choice([10_000, 100_000])


def _valid_spec():
    return {"model": "models/tiny-resnet", "dataset": "data/images", "model_dtype": "float16",
            "columns": {"image": "image"}, "keep_fp32": ["*.norm"], "samples": 4,
            "preprocess": "preprocess.py:custom_preprocessing",
            "applied_fixes": [{"id": "cast-inputs", "title": "Cast the inputs"}]}


def _documents(rng):
    """(name, bytes): random specs, mutated valid ones, truncations, byte noise, sessions."""
    valid = json.dumps(_valid_spec()).encode()
    session = json.dumps({"fp16studio_session": 1, "version": "x", "spec": _valid_spec(),
                          "diagnosis": {"ok": True}, "bench": None}).encode()
    for i in range(DOCUMENTS):
        choice = i % 6
        if choice == 0:  # a random object of known keys with random values
            doc = {rng.choice(KEYS): _random_value(rng) for _ in range(rng.randint(1, 8))}
            if rng.random() < 0.7:
                doc.setdefault("model", "m")
                doc.setdefault("dataset", "synthetic")
            yield "spec.json", json.dumps(doc).encode()
        elif choice == 1:  # a valid spec with one key given a random value
            doc = _valid_spec()
            doc[rng.choice(KEYS)] = _random_value(rng)
            yield "spec.json", json.dumps(doc).encode()
        elif choice == 2:  # truncated anywhere
            source = rng.choice([valid, session])
            yield rng.choice(["spec.json", "s.fp16studio"]), source[: rng.randint(0, len(source))]
        elif choice == 3:  # random bytes flipped
            data = bytearray(rng.choice([valid, session]))
            for _ in range(rng.randint(1, 5)):
                data[rng.randrange(len(data))] = rng.randrange(256)
            yield rng.choice(["spec.json", "s.fp16studio"]), bytes(data)
        elif choice == 4:  # a session with random parts
            doc = {"fp16studio_session": rng.choice([1, 1, 1, 0, "1", None, 2.5]),
                   "spec": rng.choice([_valid_spec(), _random_value(rng)]),
                   "diagnosis": _random_value(rng), "bench": _random_value(rng),
                   "saved_at": _random_value(rng)}
            yield "s.fp16studio", json.dumps(doc).encode()
        else:  # TOML, valid or not
            lines = [f"{rng.choice(KEYS)} = {json.dumps(_random_value(rng, 3))}"
                     for _ in range(rng.randint(1, 6))]
            text = "\n".join(['model = "m"', 'dataset = "synthetic"', *lines]).encode()
            yield "spec.toml", text[: rng.randint(0, len(text))] if rng.random() < 0.3 else text


def test_random_and_truncated_documents_are_read_or_refused(tmp_path):
    rng = random.Random(SEED)
    outcomes = {"read": 0, "refused": 0}
    with bounded(LOOP_LIMIT_S):
        for n, (name, data) in enumerate(_documents(rng)):
            path = tmp_path / f"{n}-{name}"
            path.write_bytes(data)
            for reader in (load_spec, open_session):
                try:
                    reader(path)
                    outcomes["read"] += 1
                except InputError as exc:
                    assert str(exc).strip() and "\n" not in str(exc).strip(), data[:300]
                    outcomes["refused"] += 1
                except Exception as exc:  # noqa: BLE001 - any other is the bug this test finds
                    pytest.fail(f"{reader.__name__} raised {type(exc).__name__}: {exc} "
                                f"on {data[:300]!r}")
    # Both outcomes are exercised: the generator is not all noise, nor all valid.
    assert outcomes["read"] > 20 and outcomes["refused"] > 200, outcomes


def test_the_command_line_gives_exit_2_or_a_result_never_3(demo_dir, tmp_path, capsys):
    """Truncations of a real demo spec through `diagnose`: exit 2 with one line, or a run."""
    source = json.dumps(json.loads((demo_dir / "map-cast.json").read_text())
                        | {"model": str(demo_dir / "models/tiny-resnet"),
                           "dataset": str(demo_dir / "data/images")}).encode()
    rng = random.Random(SEED)
    cuts = sorted({rng.randint(0, len(source)) for _ in range(24)} | {len(source)})
    with bounded(LOOP_LIMIT_S * 2):
        for cut in cuts:
            path = tmp_path / "spec.json"
            path.write_bytes(source[:cut])
            code = main(["diagnose", str(path)])
            err = capsys.readouterr().err
            assert code in (0, 1, 2), (cut, err)
            if code == 2:
                assert err.startswith("fp16studio: ") and err.count("\n") == 1, (cut, err)
    assert code == 1  # the whole document runs: the demo's own error finding
