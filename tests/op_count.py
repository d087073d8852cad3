"""The aten operations a function calls, counted by torch.profiler: a traced pass's against a
plain one's is what the trace adds (tests/core/test_trace_op_count.py, tests/gpu)."""

from collections import Counter

from torch.profiler import ProfilerActivity, profile


def top_level_ops(fn) -> Counter:
    """The aten operations `fn` calls directly, by name: one inside another (aminmax's own
    allocations, a copy inside `to`) is not counted apart."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    return Counter(e.name for e in prof.events() if e.name.startswith("aten::")
                   and not _inside_aten(e))


def _inside_aten(event) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return True
        parent = parent.cpu_parent
    return False
