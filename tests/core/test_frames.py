"""Frames and typed JSON: what crosses between processes, and what a bad stream does (a clean
error at once, never a hang, never a pickle)."""

import io
import math

import pytest

from fp16studio.core.common.frames import (HEADER_SIZE, MAGIC, FrameError, encode_frame,
                                           read_frame)
from fp16studio.core.common.typed_json import TypedJson


class Trickle(io.RawIOBase):
    """A pipe that hands out a few bytes per read, as a real one may."""

    def __init__(self, data: bytes, step: int = 3):
        self._data, self._step = data, step

    def readable(self):
        return True

    def readinto(self, buffer):
        part = self._data[:min(self._step, len(buffer))]
        self._data = self._data[len(part):]
        buffer[:len(part)] = part
        return len(part)


def test_frames_round_trip_one_after_another_through_a_pipe_that_trickles():
    values = [{"a": [1, 2.5, None, True]}, "é \udcff", [], {"n": 2**70}]
    stream = Trickle(b"".join(encode_frame(v) for v in values))
    assert [read_frame(stream) for _ in values] == values
    with pytest.raises(EOFError):   # the end between frames is a clean end
        read_frame(stream)


@pytest.mark.parametrize("data, said", [
    (encode_frame({"x": 1})[:-2], "ended inside a frame"),          # truncated body
    (encode_frame({"x": 1})[:HEADER_SIZE - 1], "not a frame"),       # truncated header
    (b"Welcome to the box!\n" + encode_frame(1), "not a frame"),     # a login banner
    (b"\x80\x04\x95" + b"\0" * 20, "not a frame"),                   # a pickle
    (MAGIC + (2**31).to_bytes(4, "big"), "over the limit"),          # a length of 2 GiB
    (MAGIC + (3).to_bytes(4, "big") + b"{x}", "not JSON"),
    (MAGIC + (2).to_bytes(4, "big") + b"\xff\xfe", "not JSON"),
])
def test_a_stream_that_is_not_frames_is_a_clean_error_at_once(data, said):
    with pytest.raises(FrameError, match=said):
        read_frame(io.BytesIO(data))


def test_an_oversized_frame_is_refused_before_it_is_read_or_written():
    class Endless(io.RawIOBase):   # reading the body would never end
        def readable(self):
            return True

        def readinto(self, buffer):
            buffer[:] = b"x" * len(buffer)
            return len(buffer)

    header = io.BytesIO(MAGIC + (1000).to_bytes(4, "big"))
    stream = io.BufferedReader(Endless())
    with pytest.raises(FrameError, match="over the limit"):
        read_frame(io.BufferedReader(_chain(header, stream)), max_size=999)
    with pytest.raises(FrameError, match="over the limit"):
        encode_frame("x" * 1000, max_size=999)


def _chain(first, then):
    class Chain(io.RawIOBase):
        def readable(self):
            return True

        def readinto(self, buffer):
            data = first.read(len(buffer)) or then.read(len(buffer))
            buffer[:len(data)] = data
            return len(data)

    return Chain()


# -- typed values ---------------------------------------------------------------------------------
TYPES = TypedJson({name: f"fp16studio.core.diagnostics.{module}:{name}" for name, module in (
    ("TensorNode", "tree"), ("Finding", "findings"), ("Fix", "findings"), ("CodeEdit", "findings"))})


def trip(value, types=TYPES):
    return types.read(io.BytesIO(types.frame(value)))


def test_values_json_cannot_hold_arrive_as_they_were_sent():
    value = {"shape": (2, 3), "png": b"\x89PNG\0", 1: "int key", "$": "a dollar key",
             "nested": [("a", (1,)), {"x": None}], "nan": math.inf}
    assert trip(value) == value
    assert type(trip(value)["shape"]) is tuple


def test_a_registered_type_arrives_whole_and_one_object_sent_twice_arrives_once():
    from fp16studio.core.diagnostics.findings import CodeEdit, Finding, Fix
    from fp16studio.core.diagnostics.tree import TensorNode

    root = TensorNode("pipeline", "", "group")
    leaf = root.add(TensorNode("w", "model.w", "parameter", shape=(4, 4), dtype="float16"))
    finding = Finding("overflow", "error", "model.w", "inf", {"absmax": 7e4},
                      (Fix("f1", "Keep it float32", {"keep_fp32": ["w"]}, "why",
                           CodeEdit("model.w.float()", "replace", {"file": "s.py", "line": 3})),),
                      source={"file": "s.py", "line": 3})
    tree, same, found = trip((root, leaf, finding))
    assert tree == root and found == finding   # every field: a fix's explain and code edit too
    assert same is tree.children[0]            # not a copy: identity-keyed indexes rely on it
    assert type(tree.children[0].shape) is tuple


def test_only_the_types_named_can_travel_or_be_built():
    import subprocess

    with pytest.raises(TypeError, match="cannot travel"):
        TYPES.encode(subprocess.Popen)
    with pytest.raises(TypeError, match="cannot travel"):
        TYPES.encode(lambda: None)
    # A frame from elsewhere that names anything else: refused, nothing built or imported.
    for evil in ({"$": "Popen", "args": ["sh"]}, {"$": "os:system", "command": "true"}):
        with pytest.raises(FrameError, match="does not travel here"):
            TYPES.read(io.BytesIO(encode_frame(evil)))
    # A known type with fields it does not have: a clean error, not a TypeError traceback.
    with pytest.raises(FrameError, match="bad 'TensorNode'"):
        TYPES.read(io.BytesIO(encode_frame({"$": "TensorNode", "name": "x", "bogus": 1})))
