"""Writes its process id to the file named by its first argument, then sleeps: a training run
that must not outlive the trace that started it."""

import os
import sys
import time

with open(sys.argv[1], "w") as handle:
    handle.write(str(os.getpid()))
time.sleep(600)
