"""The process boundary (Qt-free): everything that crosses between the window and the engine.

- messages: the messages both sides exchange (codec documents, one JSON frame each)
- tasks:    the named tasks the engine runs; adding one is one decorated function
- lookups:  the picker look-ups (cache scan, Hub search, model info, dataset preview)
- server:   the engine process's loop (child side)
- client:   starts the engine, sends a task and waits for its events (window side)
- transport: the engine on another machine, through the user's own ssh
- detached: an engine that outlives its connection (a run's journal, attach again from event N)

Importing this package imports neither Qt nor torch.
"""
