"""Frames: what crosses between processes, and what a bad stream does (a clean error at once,
never a hang, never a pickle). What a frame holds is the codec's (tests/engine/test_protocol.py)."""

import io

import pytest

from fp16studio.core.common.frames import (HEADER_SIZE, MAGIC, FrameError, encode_frame,
                                           read_frame)


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
