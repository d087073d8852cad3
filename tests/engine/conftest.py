"""The box: a real OpenSSH server on 127.0.0.1 (tests/remote_box.py). Not skipped where sshd
is missing: .ci/run installs it, and a run without it fails, saying so."""

import pytest
from remote_box import NoSshd, running_box


@pytest.fixture(scope="session")
def box(tmp_path_factory):
    try:
        with running_box(tmp_path_factory.mktemp("box")) as started:
            yield started
    except NoSshd as exc:
        pytest.fail(str(exc))
