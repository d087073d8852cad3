"""ssh where there is no `ssh` program: asyncssh (`pip install fp16studio[asyncssh]`) behind the
same interface. This module is a small ssh of its own, run as a process,

    python -m fp16studio.engine.remote_asyncssh [-F CONFIG] [-T] [-o OPTION]... HOST -- COMMAND

that connects as the user's ssh config says (asyncssh reads ~/.ssh/config, or CONFIG: HostName,
Port, User, IdentityFile, ProxyJump, UserKnownHostsFile; the agent) and joins its stdin, stdout
and stderr to the command's on the box, so the engine client, `--host` and remote-install drive
it exactly as they drive `ssh` (transport.ssh_command). Like ssh, it exits with the command's
exit status, or 255 after one line `ssh: ...` when it could not connect. `-o` options (the ones
fp16studio adds on Windows) are OpenSSH's and are taken and left unused.
"""

from __future__ import annotations

import asyncio
import os
import sys

SSH_FAILED = 255   # as ssh: could not connect (transport.SSH_FAILED)


def available() -> bool:
    """asyncssh is installed here (without importing it: it is only needed in the bridge)."""
    from importlib.util import find_spec

    return find_spec("asyncssh") is not None


def command() -> list[str]:
    """The bridge as an ssh program for transport.ssh_command."""
    return [sys.executable, "-m", __name__]


def main(argv: list[str] | None = None) -> int:
    try:
        config, host, remote = _parsed(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        print(f"ssh: {exc}", file=sys.stderr)
        return SSH_FAILED
    try:
        import asyncssh
    except ImportError:
        print("ssh: no ssh program here, and asyncssh is not installed "
              "(pip install 'fp16studio[asyncssh]')", file=sys.stderr)
        return SSH_FAILED
    try:
        return asyncio.run(_bridge(asyncssh, host, remote, config))
    except (OSError, asyncssh.Error) as exc:   # refused, unknown host, no key the box accepts
        print(f"ssh: {host}: {exc}", file=sys.stderr)
        return SSH_FAILED


def _parsed(words: list[str]) -> tuple[list[str], str, str]:
    """(config files, host, the command line for the box) of ssh's words as transport gives
    them."""
    config, rest = [], list(words)
    while rest and rest[0].startswith("-") and rest[0] != "--":
        option = rest.pop(0)
        if option in ("-F", "-o"):
            if not rest:
                raise ValueError(f"{option} needs a value")
            value = rest.pop(0)
            if option == "-F":
                config.append(os.path.expanduser(value))
        elif option != "-T":
            raise ValueError(f"option {option} is not understood here (only -F, -o and -T)")
    if not rest or rest[0] == "--":
        raise ValueError("no host named")
    host, rest = rest[0], rest[1:]
    if rest[:1] == ["--"]:
        rest = rest[1:]
    return config, host, " ".join(rest)


async def _bridge(asyncssh, host: str, remote: str, config: list[str]) -> int:
    # An empty tuple reads the default ~/.ssh/config, as ssh does.
    async with asyncssh.connect(host, config=config or ()) as connection:
        # Duplicates of this process's own streams: asyncssh closes what it was given.
        process = await connection.create_process(
            remote, encoding=None, stdin=os.dup(0), stdout=os.dup(1), stderr=os.dup(2))
        await process.wait(check=False)
        status = process.exit_status
    return SSH_FAILED if status is None or status < 0 else status


if __name__ == "__main__":
    sys.exit(main())
