"""Timing whole processes against each other, for the benchmarks that compare fp16studio with
the same work done plainly: rounds alternate so drift on the machine hits both alike, and the
figure is the ratio of the medians."""

from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time


def timed(cmd, ok=(0,)) -> float:
    """Seconds `cmd` took; the benchmark stops with its stderr if it exits outside `ok`."""
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode not in ok:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{done.stderr[-2000:]}")
    return time.perf_counter() - start


def call_timed(call, *args) -> float:
    """Wall seconds of one call in this process."""
    return call_clocks(call, *args)[0]


def call_clocks(call, *args) -> tuple[float, float]:
    """(wall, CPU) seconds of one call in this process: CPU time is far steadier where other
    work shares the machine."""
    wall, cpu = time.perf_counter(), time.process_time()
    call(*args)
    return time.perf_counter() - wall, time.process_time() - cpu


def cpu_timed(cmd, ok=(0,)) -> float:
    """CPU seconds (user + system) of `cmd`'s processes: on a machine other work shares, far
    steadier than the wall clock (threads spinning for work count too)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    timed(cmd, ok)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def alternate(tool_cmd, plain_cmd, rounds: int, ok=(0,), clock=timed) -> tuple[list, list]:
    """(tool times, plain times) over `rounds` alternating rounds, after one untimed run of each
    (the file cache and the datasets cache warm for both); `clock`: `timed` or `cpu_timed`."""
    timed(tool_cmd, ok), timed(plain_cmd, ok)
    tool, plain = [], []
    for _ in range(rounds):
        tool.append(clock(tool_cmd, ok))
        plain.append(clock(plain_cmd, ok))
    return tool, plain


def report(plain_label: str, plain: list, tool_label: str, tool: list) -> float:
    """Print both medians with their runs; return the ratio tool / plain."""
    for label, times in ((plain_label, plain), (tool_label, tool)):
        print(f"{label:<16} median {statistics.median(times):.2f} s  (runs: "
              + ", ".join(f"{t:.2f}" for t in times) + ")")
    return statistics.median(tool) / statistics.median(plain)
