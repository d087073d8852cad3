"""`python -m fp16studio`, and the frozen program's entry: the command line, and the two child
processes that start as this same program: the window's engine process (the command
`engine --stdio`), and the runner of `fp16studio trace` (its reserved first argument:
core/script/entry.py)."""

import sys

from fp16studio.core.script.entry import RUNNER_ARG

if sys.argv[1:2] == [RUNNER_ARG]:
    # Before the command line is parsed: the user's script runs here, under the tracer.
    from fp16studio.core.script.runner import main as run_script

    sys.exit(run_script(sys.argv[2:]))

from fp16studio.cli import main

sys.exit(main())
