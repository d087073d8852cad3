"""Abs-max and inf/NaN count of the tensors of one forward pass, taken one way for the trace
(every tensor a module call saw) and for drift (every module's output).

Per floating tensor one `torch.aminmax`: the abs-max comes from its two ends, and inf/NaN show in
them (aminmax passes NaN on). A tensor seen again unchanged (a module's output that is its
parent's output or the next module's input) is measured once. Unchanged is known from its version
counter, which every in-place operation moves (`ReLU(inplace=True)`, a residual `+=`,
`masked_fill_`): a tensor changed since it was measured is measured again. Tensors made under
`torch.inference_mode()` have no version counter, so they are measured every time they are seen.

So a measured tensor costs one device operation and the pass none of its own (on a fast GPU
each extra operation is a kernel launch the interpreter pays for while the GPU waits; on the CPU
a read per tensor is two more operations too): `aminmax` writes its two ends into the next
(min, max) slot of a chunk on the tensor's device, a buffer of `SLOTS` slots and their 0-d
views, made once and handed from pass to pass (`_spare`), so a pass makes no buffer or view
(up to `KEPT` chunks).
`read_back` reads the chunks where they lie on the host (the CPU: no operation at all), and
elsewhere gathers them into one read per device; each abs-max comes from its two ends.

Counting inf/NaN needs a full pass over a tensor that is usually freed by the end of the pass,
so it is done only with `count_nonfinite=True`: then on the CPU the values are read as they are
taken, and counted only for a tensor whose abs-max shows some. Without it a non-finite abs-max
gives a count of 1 ("at least one") and `counted` turns False: a caller that shows counts runs
the pass again with counting on.
"""

from __future__ import annotations

import ctypes
import math
import struct
import sys
import weakref


class TensorStats:
    """The statistics of one pass. `values[i]`, once read: (abs-max, inf/NaN count, abs-max of
    the finite values); the last is None where it is not known (not counted) or there are none.
    `seen` and `kinds` are read directly by the trace's hot path."""

    # Device names whose statistics are read as they are taken when counting inf/NaN.
    read_now_on = ("cpu",)
    # Device names whose chunks the host reads in place; the others' are gathered and copied.
    in_host_memory = ("cpu",)
    SLOTS = 1024  # measurements per chunk
    # Chunks kept per device and dtype for later passes (16k measurements, about 20 MB of views
    # on the host); a pass that fills more makes the rest each time (4 operations per chunk).
    KEPT = 16

    def __init__(self, count_nonfinite: bool = False):
        import torch

        self.count_nonfinite = count_nonfinite
        self.counted = True
        self.values: list = []   # per measurement; None until read back
        # id(tensor) -> [weak reference to it, its version (-1: none), index into `values`, and
        # two slots for a caller that describes tensors: the name and description it last gave]
        self.seen: dict = {}
        self.kinds: dict = {}    # (device, dtype) -> what `kind` says of them
        # (device, dtype) -> [(index, count, finite max)], in the order of the chunks' slots
        self._pending: dict = {}
        self._chunks: dict = {}   # (device, dtype) -> [(buffer of shape (2, n): min, max; slots)]
        self._slots: dict = {}    # (device, dtype) -> iterator of the (min, max) slots left
        self._aminmax, self._isfinite = torch.aminmax, torch.isfinite
        # float8 has no aminmax (nor much else): such a tensor is measured as a float32 copy
        self._no_kernels = frozenset(getattr(torch, name) for name in dir(torch)
                                     if name.startswith("float8_"))

    def kind(self, device, dtype) -> tuple[str, str, bool, bool, bool]:
        """('cuda:0', 'float16', measured, read now, floating): the names of a device and a
        dtype, whether a tensor of them is measured, whether its statistics are read as they
        are taken, and whether the dtype is a floating one; made once per pass."""
        from ..common import dtypes

        key = (device, dtype)
        kind = self.kinds.get(key)
        if kind is None:
            device_name = str(device)
            kind = self.kinds[key] = (
                device_name, dtypes.name_of(dtype),
                dtype.is_floating_point and device_name != "meta",
                self.count_nonfinite and device_name in self.read_now_on,
                dtype.is_floating_point)
        return kind

    def entry(self, tensor) -> list | None:
        """The tensor's entry of `seen`, measured now unless it was seen unchanged; None for a
        tensor that is not measured (not floating, on the meta device, or empty)."""
        seen = self.seen.get(id(tensor))
        if seen is not None and seen[0]() is tensor and seen[1] == tensor._version:
            return seen
        key = (tensor.device, tensor.dtype)
        _, _, measured, now, _ = self.kinds.get(key) or self.kind(*key)
        if not measured or not tensor.numel():
            return None
        return self.measure(tensor, key, now)

    def measure(self, tensor, key, now: bool) -> list:
        """A new entry of `seen` for the tensor, its statistics taken now, and read now too
        where `now`, else by `read_back`; `key` is its (device, dtype), of a measured kind."""
        detached = tensor.detach() if tensor.requires_grad else tensor
        if detached.dtype in self._no_kernels:
            detached = detached.float()
            key = (key[0], detached.dtype)
        index = len(self.values)
        if now:
            low, high = self._aminmax(detached)
            absmax = _absmax(low.item(), high.item())
            count = finite = None
            if self.count_nonfinite and not math.isfinite(absmax):
                count, finite = (value.item() for value in self._nonfinite(detached))
            self.values.append(self._value(absmax, count, finite))
        else:
            self._aminmax(detached, out=self._slot(key))
            count, finite = (self._nonfinite(detached) if self.count_nonfinite
                             else (None, None))
            self.values.append(None)
            self._pending.setdefault(key, []).append((index, count, finite))
        entry = [weakref.ref(tensor), -1 if tensor.is_inference() else tensor._version, index,
                 None, None]
        if entry[1] >= 0:  # an inference tensor, without a version counter, is not known again
            self.seen[id(tensor)] = entry
        return entry

    def _slot(self, key) -> tuple:
        """The next (min, max) slot of the device and dtype's chunks; a chunk more when they
        are full."""
        slot = next(self._slots.get(key, _FULL), None)
        if slot is None:
            chunk = _take_chunk(key, self.SLOTS)
            self._chunks.setdefault(key, []).append(chunk)
            self._slots[key] = iter(chunk[1])
            slot = next(self._slots[key])
        return slot

    def _nonfinite(self, tensor) -> tuple:
        """0-d tensors: the inf/NaN count, and the abs-max of the finite values (-1: none)."""
        count = (~self._isfinite(tensor)).sum()
        return count, tensor.abs().nan_to_num_(nan=-1.0, posinf=-1.0).amax()

    def _value(self, absmax: float, count: int | None, finite: float | None) -> tuple:
        """A `values` item from what was read; `count` None where it was not counted."""
        if math.isfinite(absmax):
            return absmax, 0, absmax
        if count is None:
            self.counted = False
            return absmax, 1, None
        return absmax, count, finite if finite >= 0 else None

    def read_back(self):
        """The statistics left in the chunks, and the inf/NaN counts when counted; the chunks
        then go back to `_spare` for the next pass."""
        import torch

        by_device: dict = {}
        for key, rows in self._pending.items():
            by_device.setdefault(key[0], []).append((key, rows))
        for groups in by_device.values():
            chunks = [chunk[0] for key, _ in groups for chunk in self._chunks[key]]
            rows = [row for _, rows in groups for row in rows]
            finites = [row[2] for row in rows] if self.count_nonfinite else []
            if self.kinds[groups[0][0]][0] in self.in_host_memory:
                ends = [_host_values(chunk) for chunk in chunks]
                finites = torch.stack(finites).tolist() if finites else []
            else:
                ends, finites = self._gathered(chunks, finites)
            counts = (torch.stack([row[1] for row in rows]).tolist() if self.count_nonfinite
                      else [None] * len(rows))
            ends, figures = iter(ends), zip(counts, finites or [None] * len(rows))
            for key, group in groups:
                lows, highs = [], []
                for _ in self._chunks[key]:
                    chunk_lows, chunk_highs = next(ends)
                    lows.extend(chunk_lows)
                    highs.extend(chunk_highs)
                for row, low, high, (count, finite) in zip(group, lows, highs, figures):
                    self.values[row[0]] = self._value(_absmax(low, high), count, finite)
        for key, chunks in self._chunks.items():
            spare = _spare.setdefault(key, [])
            spare.extend(chunks[:max(0, self.KEPT - len(spare))])
        self._pending.clear()
        self._chunks.clear()
        self._slots.clear()

    @staticmethod
    def _gathered(chunks, finites) -> tuple[list, list]:
        """(lows, highs) of each chunk of one device, and the finite abs-maxima, read back in
        one sync: in one dtype, the chunks' own when they share it, else float64 where the
        device has it (a float64 tensor was measured there: float32 would turn 1e300 into inf),
        float32 otherwise (exact for the narrower)."""
        import torch

        dtypes = {chunk.dtype for chunk in chunks}
        wide = (dtypes.pop() if len(dtypes) == 1 else
                torch.float64 if torch.float64 in dtypes else torch.float32)
        parts = [chunk if chunk.dtype == wide else chunk.to(wide) for chunk in chunks]
        if finites:  # a tail of two equal rows, in the chunks' shape
            parts.append(torch.stack(finites).to(wide).expand(2, -1))
        lows, highs = (torch.cat(parts, 1) if len(parts) > 1 else parts[0]).tolist()
        ends, at = [], 0
        for chunk in chunks:
            n = chunk.shape[1]
            ends.append((lows[at:at + n], highs[at:at + n]))
            at += n
        return ends, lows[at:]

    def clear(self):
        """Lets go of every tensor and figure (in place: the trace holds these containers)."""
        self.seen.clear()
        self.values.clear()
        self._pending.clear()
        self._chunks.clear()
        self._slots.clear()


_FULL = iter(())  # the slots of no chunk
# (device, dtype) -> chunks that finished passes gave back, taken by the next passes (a pass
# takes a chunk whole: passes that overlap never share one). Kept for the process's life, up to
# TensorStats.KEPT: about 1.3 MB of views per chunk.
_spare: dict = {}


def _take_chunk(key, slots: int) -> tuple:
    """A spare chunk of the device and dtype, else a new one of `slots` slots: a normal tensor
    even under inference mode, as it is written to wherever later passes go."""
    try:
        return _spare.get(key, []).pop()
    except IndexError:
        import torch

        with torch.inference_mode(False):
            buffer = torch.empty(2, slots, dtype=key[1], device=key[0])
            lows, highs = buffer.unbind()
            return buffer, list(zip(lows.unbind(), highs.unbind()))


def _absmax(low: float, high: float) -> float:
    """The abs-max from a tensor's two ends (aminmax passes NaN on)."""
    return max(abs(low), abs(high)) if low == low else math.nan


def _host_values(buffer) -> list:
    """A (2, n) buffer in host memory as (lows, highs), read in place: no torch operation
    (`tolist` would dispatch two). bfloat16 is the top half of a float32."""
    raw = ctypes.string_at(buffer.data_ptr(), buffer.nbytes)
    code = _FORMATS[str(buffer.dtype)]
    if code == "bf":
        wide, top = bytearray(2 * len(raw)), 2 if sys.byteorder == "little" else 0
        wide[top::4], wide[top + 1::4] = raw[0::2], raw[1::2]
        raw, code = wide, "f"
    n = buffer.shape[1]
    values = struct.unpack(f"={2 * n}{code}", raw)
    return values[:n], values[n:]


# struct codes of the dtypes the host reads ("bf": bfloat16, read as float32)
_FORMATS = {"torch.float64": "d", "torch.float32": "f", "torch.float16": "e",
            "torch.bfloat16": "bf"}
