"""One rank of a distributed run traced as the payload of the user's launcher (`trace --launch`):
where it writes, and what it says while it runs.

The launcher (torchrun, accelerate launch) starts every rank with the same command line, so the
runner's result path cannot tell ranks apart; the folder in RANKS_ENV (set by the parent, passed
on by the launcher with the rest of the environment) holds one set of files per rank, named by
the RANK the launcher gave it:

    rank-N.json        the rank's trace document (ScriptTrace.to_json), as a single process's
    rank-N.tree.json   its tensor tree (not in the document: the window shows the chosen rank's)
    rank-N.started     the tracer is in place: from here on, what happens is the script's
    rank-N.done        rank-N.json is the rank's final document (the script is over), not the
                       one written as a model's first pass ended
    rank-N.beat.json   written every BEAT_S by a thread of the rank's own: the steps followed so
                       far and the line of the user's code the rank is at now. A rank stuck in a
                       collective (its main thread inside C++) or killed by the launcher still
                       has its last step and its place on disk.

Nothing here talks to the other ranks: the tracer adds no collective of its own.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

RANKS_ENV = "FP16STUDIO_TRACE_RANKS"
BEAT_S = 0.5
# What the script made, kept to the interpreter's exit (see keep_until_exit).
_KEPT: list = []


class RankFiles:
    """The files of this rank, or None (`from_env`) when no launcher started it."""

    def __init__(self, folder: Path, rank: int):
        self.folder, self.rank = folder, rank
        self._last = lambda: None
        self._at = None   # the last line of the user's seen while the script ran
        # One beat at a time, none after the last: a beat read before the script's end and
        # written after it would put back what the last one said.
        self._lock = threading.Lock()
        self._over = False
        self.result = folder / f"rank-{rank}.json"
        self.tree = folder / f"rank-{rank}.tree.json"
        self.beat = folder / f"rank-{rank}.beat.json"
        self.done = folder / f"rank-{rank}.done"

    @classmethod
    def from_env(cls) -> RankFiles | None:
        folder = os.environ.get(RANKS_ENV)
        if not folder:
            return None
        return cls(Path(folder), int(os.environ.get("RANK", "0")))

    def write(self, result) -> None:
        if result.tree is not None:   # before the document: a reader of it finds its tree
            _write_json(self.tree, result.tree.to_json())
        _write_json(self.result, result.to_json())
        if result.complete:
            self._last()   # the steps and settings as the script left them
            self._over = True
            self.done.touch()

    @staticmethod
    def keep_until_exit(*made) -> None:
        """The script's objects (its globals, its exception's frames) live until the process
        ends, as under `python SCRIPT`. Freed earlier, a DDP model with a Python communication
        hook deadlocks: its process group's destructor joins gloo's thread while holding the
        GIL, and that thread needs the GIL to release the hook (torch 2.13)."""
        _KEPT.extend(made)

    @staticmethod
    def exit_status(outcome: dict) -> int:
        """The rank's exit status: its script's (1 when it raised or exited with an error)."""
        return 1 if outcome.get("error") else 0

    def _beat(self, watch, identity: dict, thread_id):
        with self._lock:
            if not self._over:
                self._write_beat(watch, identity, thread_id)

    def _write_beat(self, watch, identity: dict, thread_id):
        try:
            steps = [step.to_json() for step in watch.steps.documents()]
            open_step = bool(watch.steps.steps) and not watch.steps.steps[-1].done
            precision = {name: setting for w in watch.watchers if hasattr(w, "facts")
                         for name, setting in w.facts().items()}
        except Exception:  # noqa: BLE001 - a list grew while read: the next beat has it
            return
        self._at = _user_line(watch.user, thread_id) or self._at
        _write_json(self.beat, dict(identity, steps=steps, in_step=open_step,
                                    precision=precision, at=self._at, time=time.time()))

    def start_beat(self, watch) -> threading.Thread:
        """The heartbeat: a daemon thread that ends with the process."""
        identity = {"rank": self.rank, "pid": os.getpid(),
                    **{key.lower(): int(os.environ[key]) for key in
                       ("WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")
                       if os.environ.get(key, "").isdigit()}}
        main = threading.main_thread().ident

        def beat():
            while True:
                self._beat(watch, identity, main)
                time.sleep(BEAT_S)

        self._last = lambda: self._beat(watch, identity, None)
        thread = threading.Thread(target=beat, name="fp16studio-rank-beat", daemon=True)
        thread.start()
        return thread


def _user_line(user, thread_id) -> dict | None:
    """The innermost line of the user's own code the thread is running now (None: over)."""
    return user.frame_source(sys._current_frames().get(thread_id)) if thread_id else None


def _write_json(path: Path, doc: dict) -> None:
    tmp = path.with_name(f".{path.name}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(doc, default=str))
    os.replace(tmp, path)   # a reader never sees half a file
