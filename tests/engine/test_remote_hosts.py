"""What the window needs to choose a box, without a network: the hosts of an ssh config, a
GPU query's answer, a Test's outcome in one line, and the engine client moved to another
transport between jobs."""

import pytest

from fp16studio import __version__
from fp16studio.core.common.errors import CancelToken
from fp16studio.engine import messages as m
from fp16studio.engine.client import EngineClient, local_engine
from fp16studio.engine.lookups import MIB, parse_gpu_query
from fp16studio.engine.transport import config_hosts
from fp16studio.gui.connect_dialog import probe_outcome


def test_the_hosts_of_an_ssh_config_patterns_left_out_includes_followed(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    ssh = tmp_path / ".ssh"
    (ssh / "conf.d").mkdir(parents=True)
    (ssh / "config").write_text(
        "# my boxes\nHost gpu1 \"gpu 2\"  # the lab's\n  HostName 10.0.0.1\n"
        "Host *.lab !bastion ?x\nhost=jump\nInclude conf.d/*.conf\nMatch host gpu1\n"
        "Host gpu1\nHost \"unbalanced\n")
    (ssh / "conf.d/a.conf").write_text("Host a1 a*\n")
    assert config_hosts() == ["gpu1", "gpu 2", "jump", "a1"]
    assert config_hosts(tmp_path / "none") == []


def test_a_gpu_query_in_bytes_and_a_board_without_figures_still_named():
    assert parse_gpu_query("NVIDIA H200, 1024, 143771\nTesla, K80, [N/A], [N/A]\n\n") == [
        {"name": "NVIDIA H200", "used": 1024 * MIB, "total": 143771 * MIB},
        {"name": "Tesla, K80", "used": None, "total": None}]


REPORT = {"host": "node7", "fp16studio": __version__, "python": "3.11", "torch": "2.5.1",
          "cuda": "12.4", "gpus": [{"name": "H200", "used": 2 << 30, "total": 140 << 30}]}
STOPPED = "The engine process stopped unexpectedly ({}). Run again to start a fresh one."


@pytest.mark.parametrize("ending, line, offer", [
    (m.Result(1, REPORT), f"gpu1: fp16studio {__version__} · torch 2.5.1 · CUDA 12.4 · "
                          "GPU 0 H200 2.0 GiB/140.0 GiB", False),
    (m.Result(1, {**REPORT, "fp16studio": "0.0.1"}),
     f"gpu1: fp16studio 0.0.1 there, {__version__} here: install {__version__} into python3", True),
    (m.Failed(1, STOPPED.format("exit code 255: ssh: connect to host gpu1 port 22: Connection "
                                "refused")),
     "gpu1: cannot connect (ssh: connect to host gpu1 port 22: Connection refused)", False),
    (m.Failed(1, STOPPED.format("exit code 1: /usr/bin/python3: No module named fp16studio")),
     f"gpu1: no fp16studio for python3 there: install {__version__} into it", True),
    (m.Failed(1, STOPPED.format("exit code 127: bash: python3: command not found")),
     "gpu1: the engine did not start (bash: python3: command not found)", False),
    (m.Cancelled(1), "gpu1: no answer in 120 s", False),
])
def test_a_test_of_a_host_is_one_line_and_offers_the_install_where_it_is_the_remedy(
        ending, line, offer):
    assert probe_outcome("gpu1", "python3", ending) == (line, offer)


def test_the_client_moves_to_another_engine_between_jobs():
    client = EngineClient()
    try:
        first = client.run("engine_jobs:pid", (), {}, CancelToken(), lambda event: None).value
        client.use(local_engine())
        events = []
        second = client.run("engine_jobs:pid", (), {}, CancelToken(), events.append).value
        assert second != first and events[0].message == "Starting the engine process…"
        assert client.run("engine_jobs:pid", (), {}, CancelToken(), events.append).value == second
    finally:
        client.close(grace_s=5)


def test_a_remote_python_under_the_box_s_home_is_expanded_there_nothing_else_is():
    from fp16studio.engine.transport import remote_python, ssh_command

    words = remote_python("env A='x y' ~/venvs/t/bin/python ~root/p")
    assert ssh_command("gpu1", words)[-1] == "env 'A=x y' ~/venvs/t/bin/python '~root/p'"
