"""Abs-max and inf/NaN count of the tensors of one forward pass, taken one way for the trace
(every tensor a module call saw) and for drift (every module's output).

Per floating tensor one `torch.aminmax`: the abs-max comes from its two ends, and inf/NaN show in
them (aminmax passes NaN on). A tensor seen again unchanged (a module's output that is its
parent's output or the next module's input) is measured once. Unchanged is known from its version
counter, which every in-place operation moves (`ReLU(inplace=True)`, a residual `+=`,
`masked_fill_`): a tensor changed since it was measured is measured again. Tensors made under
`torch.inference_mode()` have no version counter, so they are measured every time they are seen.

So a measured tensor costs one device operation: `aminmax` writes its two ends into the next
slots of a buffer on the tensor's device (one per device and dtype, grown a chunk at a time), and
`read_back` reads the buffers in one sync per device (on a fast GPU each
extra operation is a kernel launch the interpreter pays for while the GPU waits; on the CPU a
read per tensor is two more operations too). Counting inf/NaN needs a full pass over a tensor
that is usually freed by the end of the pass, so it is done only with `count_nonfinite=True`:
then on the CPU the values are read as they are taken, and counted only for a tensor whose
abs-max shows some. Without it a non-finite abs-max gives a count of 1 ("at least one") and
`counted` turns False: a caller that shows counts runs the pass again with counting on.
"""

from __future__ import annotations

import math
import weakref


class TensorStats:
    """The statistics of one pass. `values[i]`, once read: (abs-max, inf/NaN count, abs-max of
    the finite values); the last is None where it is not known (not counted) or there are none.
    `seen` and `kinds` are read directly by the trace's hot path."""

    # Device names whose statistics are read as they are taken when counting inf/NaN.
    read_now_on = ("cpu",)

    def __init__(self, count_nonfinite: bool = False):
        import torch

        self.count_nonfinite = count_nonfinite
        self.counted = True
        self.values: list = []   # per measurement; None until read back
        # id(tensor) -> [weak reference to it, its version (-1: none), index into `values`, and
        # two slots for a caller that describes tensors: the name and description it last gave]
        self.seen: dict = {}
        self.kinds: dict = {}    # (device, dtype) -> what `kind` says of them
        # (device, dtype) -> [(index, count, finite max)], in the order of the buffer's slots
        self._pending: dict = {}
        self._buffers: dict = {}  # (device, dtype) -> [buffer of shape (2, SLOTS): min, max]
        self._slots: dict = {}    # (device, dtype) -> iterator of the (min, max) slots left
        self._aminmax, self._isfinite = torch.aminmax, torch.isfinite

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
        index = len(self.values)
        if now:
            low, high = self._aminmax(detached)
            low = low.item()  # aminmax passes NaN on
            absmax = max(abs(low), abs(high.item())) if low == low else math.nan
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

    SLOTS = 1024  # measurements per buffer

    def _slot(self, key) -> tuple:
        """The next (min, max) slot of the device and dtype's buffers, as two 0-d views; a new
        buffer when they are full. A normal tensor even under inference mode: it is written
        to wherever the pass goes next."""
        slot = next(self._slots.get(key, _FULL), None)
        if slot is None:
            import torch

            with torch.inference_mode(False):
                buffer = torch.empty(2, self.SLOTS, dtype=key[1], device=key[0])
            self._buffers.setdefault(key, []).append(buffer)
            lows, highs = buffer.unbind()
            self._slots[key] = zip(lows.unbind(), highs.unbind())
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
        """The statistics left on devices, stacked per device and dtype, read back in one sync
        per device (a second one for the counts, when counted)."""
        import torch

        by_device: dict = {}
        for key, rows in self._pending.items():
            by_device.setdefault(key[0], []).append((key, rows))
        for groups in by_device.values():
            order, maxima, finites, counts = [], [], [], []
            # float64 where the device has it (a float64 tensor was measured there): float32
            # would turn 1e300 into inf; exact for every narrower dtype.
            wide = (torch.float64 if any(key[1] == torch.float64 for key, _ in groups)
                    else torch.float32)
            for key, rows in groups:
                order += [row[0] for row in rows]
                buffers = self._buffers[key]
                ends = (torch.cat(buffers, 1) if len(buffers) > 1 else buffers[0])[:, :len(rows)]
                absmax = ends.abs().amax(0)  # NaN wins
                maxima.append(absmax if key[1] == wide else absmax.to(wide))
                if self.count_nonfinite:
                    counts.append(torch.stack([row[1] for row in rows]))
                    finites.append(torch.stack([row[2] for row in rows]).to(wide))
            maxima = maxima + finites  # the finite abs-maxima after them
            maxima = (torch.cat(maxima) if len(maxima) > 1 else maxima[0]).tolist()
            n = len(order)
            counts = torch.cat(counts).tolist() if counts else [None] * n
            finite = maxima[n:] or [None] * n
            for index, absmax, count, finite_max in zip(order, maxima, counts, finite):
                self.values[index] = self._value(absmax, count, finite_max)
        self._pending.clear()
        self._buffers.clear()
        self._slots.clear()

    def clear(self):
        """Lets go of every tensor and figure (in place: the trace holds these containers)."""
        self.seen.clear()
        self.values.clear()
        self._pending.clear()
        self._buffers.clear()
        self._slots.clear()


_FULL = iter(())  # the slots of no buffer
