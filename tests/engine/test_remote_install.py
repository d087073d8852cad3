"""`fp16studio remote-install HOST`: this exact version's wheel sent through ssh and installed
into a Python on the box that lacks fp16studio (the real sshd on loopback, conftest.box)."""

import subprocess
import sys
import venv

from fp16studio import __version__


def cli(*argv, env):
    return subprocess.run([sys.executable, "-m", "fp16studio", *argv], capture_output=True,
                          text=True, env=env, stdin=subprocess.DEVNULL, timeout=300)


def test_a_python_without_fp16studio_gets_this_version_through_ssh(box, tmp_path):
    venv.create(tmp_path / "venv", with_pip=True)   # the box's index is not reachable: --no-deps
    python = f"env HOME={box.home} {tmp_path / 'venv/bin/python'}"
    done = cli("remote-install", "box", "--remote-python", python, "--no-deps",
               env=box.env(HOME=str(tmp_path / "here")))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(f"installed fp16studio {__version__} into env HOME=")
    [sent] = (box.home / ".cache/fp16studio/wheels").glob("fp16studio-*.whl")
    [built] = (tmp_path / "here/.cache/fp16studio/wheels").glob("fp16studio-*.whl")
    assert sent.read_bytes() == built.read_bytes()
    there = subprocess.run([tmp_path / "venv/bin/python", "-c",
                            "import fp16studio; print(fp16studio.__version__, fp16studio.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path,
                           env={"PATH": "/usr/bin:/bin"})
    version, path = there.stdout.split()
    assert version == __version__ and path.startswith(str(tmp_path / "venv"))


def test_an_install_on_a_host_that_cannot_be_reached_is_one_line(box, tmp_path):
    done = cli("remote-install", "nosuchhost.invalid", env=box.env(HOME=str(tmp_path)))
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith(
        "fp16studio: nosuchhost.invalid: cannot connect (ssh: Could not resolve hostname")
