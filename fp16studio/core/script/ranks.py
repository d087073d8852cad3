"""`fp16studio trace --launch "torchrun --nproc-per-node N" SCRIPT -- ARGS`: a distributed run
traced as the payload of the user's own launcher.

The launcher runs fp16studio's trace runner (`-m fp16studio --fp16studio-trace-runner ...`) in
place of the script, so rendezvous, environment and multi-node set-up stay the launcher's; each
rank is traced as a single process is (core/script/runner.py) and writes its own files
(core/script/rank_files.py); nothing of ours talks between ranks. This side waits for the
launcher within two bounds, then merges what the ranks wrote (core/script/rank_merge.py):

- `timeout`: the script's own limit, as for one process (from the first rank's start);
- `rank_wait`: once one rank is over (done, or failed), how long the others may take to end
  before they are named as hung. A rank that stops in a collective leaves the others waiting
  there until the backend's own timeout (30 minutes for gloo); that is not waited for.

Ranks are started by the launcher in sessions of their own, out of reach of a signal to its
group: each rank says its pid in its heartbeat, and each is ended by its own group too, so
nothing is left running.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from ..common.errors import InputError, check_cancel, report_progress
from ..common.processes import process_alive, signal_group
from .entry import RUNNER_ARG, STEPS_ENV, frozen
from .rank_files import RANKS_ENV
from .rank_merge import RankRecord, merged_trace
from .trace import GRACE_S, STARTUP_S, _forward_lines, resolve_script

RANK_WAIT_S = 60.0
# The launchers whose payload can be a module (`-m`), by the words that start them.
LAUNCHERS = {("torchrun",): "-m", ("accelerate", "launch"): "-m",
             ("python", "-m", "torch.distributed.run"): "-m",
             ("python3", "-m", "torch.distributed.run"): "-m", ("deepspeed",): "--module"}


def launch_command(launch: str, script: Path, args) -> list[str]:
    """The user's launcher with fp16studio's runner as its program. InputError for a launcher
    that is not one of LAUNCHERS, not installed, or given the script itself."""
    words = shlex.split(launch)
    if not words:
        raise InputError('--launch needs the launcher\'s command, as in: --launch '
                         '"torchrun --nproc-per-node 2"')
    if frozen():
        raise InputError("--launch runs fp16studio as the launcher's Python program: use "
                         "fp16studio installed with pip (pip install fp16studio), not the app")
    start = next((key for key in LAUNCHERS
                  if [Path(w).name if i == 0 else w for i, w in enumerate(words[:len(key)])]
                  == list(key)), None)
    if start is None:
        known = ", ".join(" ".join(key) for key in LAUNCHERS)
        raise InputError(f"--launch {words[0]}: not a launcher fp16studio knows ({known})")
    if shutil.which(words[0]) is None:
        raise InputError(f"--launch: no such program: {words[0]}")
    if any(word.endswith(".py") or word in ("-m", "--module") for word in words[len(start):]):
        raise InputError("--launch holds the launcher and its options only; the script goes "
                         'after it: fp16studio trace --launch "torchrun --nproc-per-node 2" '
                         "train.py -- ARGS")
    # The runner's result path: each rank writes its own files instead (rank_files).
    return [*words, LAUNCHERS[start], "fp16studio", RUNNER_ARG, "ranks", str(script),
            *map(str, args)]


def trace_launch(launch: str, path, args=(), timeout: float | None = None,
                 rank_wait: float = RANK_WAIT_S, progress=None, cancel=None, output=None,
                 steps: int = 2):
    """Run `path` under the launcher `launch` with every rank traced; the merged ScriptTrace
    (its `ranks` say what each rank did). Raises InputError for bad input, Cancelled."""
    script = resolve_script(str(path))
    for name, value in (("--timeout", timeout), ("--rank-wait", rank_wait)):
        if value is not None and value <= 0:
            raise InputError(f"{name} must be more than 0 seconds, got {value:g}")
    command = launch_command(launch, script, args)
    report_progress(progress, "script", f"launching {script.name}: {launch}")
    with tempfile.TemporaryDirectory(prefix="fp16studio-ranks-") as work:
        folder = Path(work)
        env = dict(os.environ, PYTHONUNBUFFERED="1", **{STEPS_ENV: str(int(steps)),
                                                        RANKS_ENV: work})
        start = time.perf_counter()
        launcher = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=env, start_new_session=True)
        readers = [_forward_lines(launcher.stdout, "stdout", output or (lambda *_: None)),
                   _forward_lines(launcher.stderr, "stderr", output or (lambda *_: None))]
        try:
            stopped = _wait(launcher, folder, timeout, rank_wait, cancel)
            # What a rank writes once interrupted is what it ran until then: not its end.
            over = {int(p.name.split("-")[1].split(".")[0]) for p in folder.glob("rank-*.done")}
        finally:
            _end_all(launcher, folder)
        for reader in readers:
            reader.join(timeout=5)
        records = _records(folder)
    result = merged_trace(records, str(script), args, launch, launcher.returncode, stopped,
                          timeout, rank_wait, over)
    result.timings["total"] = round(time.perf_counter() - start, 4)
    return result


def _wait(launcher, folder: Path, timeout, rank_wait: float, cancel) -> str | None:
    """Wait for the launcher; why it was stopped ("timeout", "hung"), or None when it ended."""
    begun = time.monotonic()
    first_over = None
    while launcher.poll() is None:
        check_cancel(cancel)
        now = time.monotonic()
        started = sorted(folder.glob("rank-*.started"))
        if timeout is not None:
            since = min((p.stat().st_mtime for p in started), default=None)
            late = (time.time() > since + timeout if since is not None
                    else now > begun + timeout + STARTUP_S)
            if late:
                return "timeout"
        if first_over is None and _any_over(folder):
            first_over = now
        if first_over is not None and now > first_over + rank_wait:
            return "hung"
        time.sleep(0.1)
    return None


def _any_over(folder: Path) -> bool:
    """A rank finished its script, or its process is gone while the launcher runs on."""
    if any(folder.glob("rank-*.done")):
        return True
    return any(not process_alive(beat.get("pid")) for beat in _beats(folder).values())


def _beats(folder: Path) -> dict:
    beats = {}
    for path in folder.glob("rank-*.beat.json"):
        doc = _read_json(path)
        if doc is not None:
            beats[doc["rank"]] = doc
    return beats


def _end_all(launcher, folder: Path):
    """Interrupt every rank and the launcher (a rank at Python's level then writes what it
    traced), then kill whatever is left: each rank's group, and the launcher's."""
    pids = [beat["pid"] for beat in _beats(folder).values() if process_alive(beat.get("pid"))]
    if launcher.poll() is None or pids:
        for group in [launcher.pid, *pids]:
            signal_group(group, signal.SIGINT)
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline and (
                launcher.poll() is None or any(process_alive(pid) for pid in pids)):
            time.sleep(0.05)
        for group in [launcher.pid, *pids]:
            signal_group(group, signal.SIGKILL)
    launcher.wait()


def _records(folder: Path) -> list[RankRecord]:
    beats = _beats(folder)
    ranks = {int(p.name.split("-")[1].split(".")[0]) for p in folder.glob("rank-*")}
    world = max((b.get("world_size", 0) for b in beats.values()), default=0)
    ranks |= set(range(world))
    return [RankRecord(rank=rank, document=_read_json(folder / f"rank-{rank}.json"),
                       tree=_read_json(folder / f"rank-{rank}.tree.json"),
                       beat=beats.get(rank),
                       started=(folder / f"rank-{rank}.started").exists(),
                       done=(folder / f"rank-{rank}.done").exists(),
                       ended=_mtime(folder / f"rank-{rank}.done"))
            for rank in sorted(ranks)]


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _read_json(path: Path):
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
