"""Length-prefixed JSON frames over any byte stream: a pipe, stdin/stdout, an ssh channel.

A frame is MAGIC, the body's length (4 bytes, big-endian) and the body, one JSON value in
UTF-8. The magic makes a stream that is not ours (a library printing to the engine's stdout, a
login banner over ssh) a clean FrameError at its first bytes, not a length of gigabytes to
wait for; MAX_FRAME bounds what a reader allocates. Nothing is ever unpickled: what a frame
can hold is what JSON can (documents on top: codec.py).
"""

from __future__ import annotations

import json
import os
import struct
import sys
import threading

MAGIC = b"F16J"
_LENGTH = struct.Struct(">I")
HEADER_SIZE = len(MAGIC) + _LENGTH.size
MAX_FRAME = 1 << 30   # 1 GiB: a 21k-tensor diagnosis is a few MB


class FrameError(ValueError):
    """The stream holds something that is not a whole frame of ours: it cannot be read on."""


def encode_frame(value, max_size: int = MAX_FRAME) -> bytes:
    """One frame holding the JSON value `value` (ASCII JSON: lone surrogates survive)."""
    return frame_of(json.dumps(value, separators=(",", ":")).encode("ascii"), max_size)


def frame_of(body: bytes, max_size: int = MAX_FRAME) -> bytes:
    """The frame of a body already encoded (a journal's line)."""
    if len(body) > max_size:
        raise FrameError(f"a frame of {len(body)} bytes is over the limit of {max_size}")
    return MAGIC + _LENGTH.pack(len(body)) + body


def read_frame(stream, max_size: int = MAX_FRAME, object_hook=None):
    """The next frame's value from the binary stream; EOFError at a clean end (between
    frames), FrameError for anything else that is not a whole frame."""
    return decode_body(read_body(stream, max_size), object_hook)


def read_body(stream, max_size: int = MAX_FRAME) -> bytes:
    """The next frame's body, not yet decoded (read_frame's errors)."""
    header = _read_exactly(stream, HEADER_SIZE)
    if not header:
        raise EOFError("the stream ended")
    if len(header) < HEADER_SIZE or header[:len(MAGIC)] != MAGIC:
        raise FrameError(f"not a frame: the stream starts with {header[:16]!r}")
    (size,) = _LENGTH.unpack(header[len(MAGIC):])
    if size > max_size:
        raise FrameError(f"a frame of {size} bytes is over the limit of {max_size}")
    body = _read_exactly(stream, size)
    if len(body) < size:
        raise FrameError(f"the stream ended inside a frame ({len(body)} of {size} bytes)")
    return body


def decode_body(body: bytes, object_hook=None):
    """A frame body's JSON value (FrameError if it is not JSON)."""
    try:
        return json.loads(body.decode("ascii"), object_hook=object_hook)
    except (UnicodeDecodeError, ValueError) as exc:
        raise FrameError(f"a frame that is not JSON: {exc}") from None


def _read_exactly(stream, size: int) -> bytes:
    """Up to `size` bytes: fewer only where the stream ended (a pipe returns what it has)."""
    parts, left = [], size
    while left:
        part = stream.read(left)
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


class FrameWriter:
    """Writes frames to a binary stream from any thread, each one whole."""

    def __init__(self, stream):
        self._stream = stream
        self._lock = threading.Lock()

    def write(self, value):
        frame = encode_frame(value)
        with self._lock:
            self._stream.write(frame)
            self._stream.flush()

    def close(self):
        with self._lock:
            self._stream.close()


# -- a pipe to a child process that is neither its stdin, stdout nor stderr --------------------
def pipe_to_child() -> tuple[int, int, str, dict]:
    """(read fd, write fd, the write end's name for the child, Popen keywords that pass it on).
    Close the write fd here once the child started; the child opens it with `child_end`."""
    read_fd, write_fd = os.pipe()
    if sys.platform == "win32":
        import msvcrt
        import subprocess

        handle = msvcrt.get_osfhandle(write_fd)
        os.set_handle_inheritable(handle, True)
        info = subprocess.STARTUPINFO(lpAttributeList={"handle_list": [handle]})
        return read_fd, write_fd, str(handle), {"startupinfo": info, "close_fds": True}
    return read_fd, write_fd, str(write_fd), {"pass_fds": (write_fd,)}


def child_end(name: str):
    """In the child: the binary stream of the pipe `pipe_to_child` named, kept from the
    processes this one starts (a script's own children must not hold it open)."""
    if sys.platform == "win32":
        import msvcrt

        fd = msvcrt.open_osfhandle(int(name), 0)
    else:
        fd = int(name)
    os.set_inheritable(fd, False)
    return os.fdopen(fd, "wb")
