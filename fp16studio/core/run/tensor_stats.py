"""Abs-max and inf/NaN count of the tensors of one forward pass, taken one way for the trace
(every tensor a module call saw) and for drift (every module's output).

Per floating tensor one `torch.aminmax`: the abs-max comes from its two ends, and inf/NaN show in
them (aminmax passes NaN on). A tensor seen again unchanged (a module's output that is its
parent's output or the next module's input) is measured once. Unchanged is known from its version
counter, which every in-place operation moves (`ReLU(inplace=True)`, a residual `+=`,
`masked_fill_`): a tensor changed since it was measured is measured again. Tensors made under
`torch.inference_mode()` have no version counter, so they are measured every time they are seen.

On the CPU the values are read as they are taken (nothing to wait for, and no 0-d tensors to
keep); on an accelerator they stay there as 0-d tensors and `read_back` reads them in one sync per
device. Counting inf/NaN needs a full pass over a tensor that is usually freed by the end of the
pass, so it is done only with `count_nonfinite=True`: where values are read as taken, only for
a tensor whose abs-max shows some. Without it a non-finite abs-max gives a count of 1 ("at least
one") and `counted` turns False: a caller that shows counts runs the pass again with counting on.
"""

from __future__ import annotations

import math
import weakref


class TensorStats:
    """The statistics of one pass. `values[i]`, once read: (abs-max, inf/NaN count, abs-max of
    the finite values); the last is None where it is not known (not counted) or there are none.
    `seen` and `kinds` are read directly by the trace's hot path."""

    read_now_on = ("cpu",)  # device names whose statistics are read as they are taken

    def __init__(self, count_nonfinite: bool = False):
        import torch

        self.count_nonfinite = count_nonfinite
        self.counted = True
        self.values: list = []   # per measurement; None until read back
        # id(tensor) -> [weak reference to it, its version (-1: none), index into `values`, and
        # two slots for a caller that describes tensors: the name and description it last gave]
        self.seen: dict = {}
        self.kinds: dict = {}    # (device, dtype) -> what `kind` says of them
        self._pending: dict = {}  # (device, dtype) -> [(index, min, max, count, finite max)]
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
                device_name in self.read_now_on, dtype.is_floating_point)
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
        low, high = self._aminmax(detached)
        index = len(self.values)
        if now:
            low = low.item()  # aminmax passes NaN on
            absmax = max(abs(low), abs(high.item())) if low == low else math.nan
            count = finite = None
            if self.count_nonfinite and not math.isfinite(absmax):
                count, finite = (value.item() for value in self._nonfinite(detached))
            self.values.append(self._value(absmax, count, finite))
        else:
            count, finite = (self._nonfinite(detached) if self.count_nonfinite
                             else (None, None))
            self.values.append(None)
            self._pending.setdefault(key, []).append((index, low, high, count, finite))
        entry = [weakref.ref(tensor), -1 if tensor.is_inference() else tensor._version, index,
                 None, None]
        if entry[1] >= 0:  # an inference tensor, without a version counter, is not known again
            self.seen[id(tensor)] = entry
        return entry

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
        for (device, dtype), rows in self._pending.items():
            by_device.setdefault(device, []).append((dtype, rows))
        for groups in by_device.values():
            order, maxima, finites, counts = [], [], [], []
            # float64 where the device has it (a float64 tensor was measured there): float32
            # would turn 1e300 into inf; exact for every narrower dtype.
            wide = (torch.float64 if any(dtype == torch.float64 for dtype, _ in groups)
                    else torch.float32)
            for _, rows in groups:
                order += [row[0] for row in rows]
                low, high = (torch.stack([row[end] for row in rows]) for end in (1, 2))
                maxima.append(torch.maximum(low.abs(), high.abs()).to(wide))  # NaN wins
                if self.count_nonfinite:
                    counts.append(torch.stack([row[3] for row in rows]))
                    finites.append(torch.stack([row[4] for row in rows]).to(wide))
            maxima = torch.cat(maxima + finites).tolist()  # the finite abs-maxima after them
            n = len(order)
            counts = torch.cat(counts).tolist() if counts else [None] * n
            finite = maxima[n:] or [None] * n
            for index, absmax, count, finite_max in zip(order, maxima, counts, finite):
                self.values[index] = self._value(absmax, count, finite_max)
        self._pending.clear()

    def clear(self):
        """Lets go of every tensor and figure (in place: the trace holds these containers)."""
        self.seen.clear()
        self.values.clear()
        self._pending.clear()
