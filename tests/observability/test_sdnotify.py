"""SystemdNotifier against a datagram socket the test owns, as systemd would listen:
READY, WATCHDOG (rate-limited to half WATCHDOG_USEC), STOPPING; paths and abstract
addresses; a no-op outside systemd; never an exception when nobody listens."""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.serving.sdnotify import SystemdNotifier


class Listener:
    def __init__(self, sock: socket.socket, env_value: str) -> None:
        self.sock = sock
        self.env_value = env_value

    def messages(self) -> list[str]:
        received = []
        while True:
            try:
                received.append(self.sock.recv(4096).decode())
            except BlockingIOError:
                return received


@pytest.fixture(params=["path", "abstract"])
def listener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Listener]:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        if request.param == "path":
            path = str(tmp_path / "notify.sock")
            sock.bind(path)
            env_value = path
        else:
            name = f"nodeagent-test-{uuid.uuid4().hex}"
            sock.bind("\0" + name)
            env_value = "@" + name
        sock.setblocking(False)
        yield Listener(sock, env_value)
    finally:
        sock.close()


def notifier_for(listener: Listener, **extra: str) -> SystemdNotifier:
    return SystemdNotifier.from_environ({"NOTIFY_SOCKET": listener.env_value, **extra})


def test_ready_status_and_stopping_reach_the_socket(listener: Listener) -> None:
    notifier = notifier_for(listener)
    try:
        assert notifier.enabled
        assert notifier.ready(status="evaluating every 1 s")
        assert notifier.status("memory pressure")
        assert notifier.stopping()
    finally:
        notifier.close()
    assert listener.messages() == [
        "READY=1\nSTATUS=evaluating every 1 s",
        "STATUS=memory pressure",
        "STOPPING=1",
    ]


def test_watchdog_is_fed_at_most_every_half_timeout(listener: Listener) -> None:
    notifier = notifier_for(listener, WATCHDOG_USEC="30000000")
    assert notifier.watchdog_interval == 15.0
    sent = [notifier.watchdog(now) for now in (100.0, 101.0, 114.9, 115.0, 116.0, 131.0)]
    notifier.close()
    assert sent == [True, False, False, True, False, True]
    assert listener.messages() == ["WATCHDOG=1"] * 3


@pytest.mark.parametrize(
    ("environ", "interval"),
    [
        pytest.param({"WATCHDOG_USEC": "2000000"}, 1.0, id="for-us"),
        pytest.param({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "4242"}, 1.0, id="our-pid"),
        pytest.param({"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": "1"}, None, id="other-pid"),
        pytest.param({"WATCHDOG_USEC": "0"}, None, id="zero"),
        pytest.param({"WATCHDOG_USEC": "soon"}, None, id="garbage"),
        pytest.param({}, None, id="no-watchdog"),
    ],
)
def test_watchdog_settings_as_sd_watchdog_enabled_reads_them(
    environ: dict[str, str], interval: float | None
) -> None:
    notifier = SystemdNotifier.from_environ({"NOTIFY_SOCKET": "@x", **environ}, pid=4242)
    assert notifier.watchdog_interval == interval


def test_without_notify_socket_everything_is_a_no_op() -> None:
    notifier = SystemdNotifier.from_environ({"WATCHDOG_USEC": "1000000"})
    assert not notifier.enabled
    assert notifier.watchdog_interval is None
    assert not notifier.ready()
    assert not notifier.watchdog(0.0)
    assert not notifier.stopping()


def test_an_absent_listener_is_logged_once_and_never_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    notifier = SystemdNotifier.from_environ({"NOTIFY_SOCKET": str(tmp_path / "gone.sock")})
    assert not notifier.ready()
    assert not notifier.stopping()
    warnings = [r for r in caplog.records if "cannot notify systemd" in r.getMessage()]
    assert len(warnings) == 1


def test_unsupported_socket_kinds_disable_notifications(caplog: pytest.LogCaptureFixture) -> None:
    notifier = SystemdNotifier.from_environ({"NOTIFY_SOCKET": "vsock:2:1234"})
    assert not notifier.enabled
    assert not notifier.ready()
    assert "not a unix socket" in caplog.text


def test_process_environment_is_the_default() -> None:
    saved = os.environ.pop("NOTIFY_SOCKET", None)
    try:
        assert not SystemdNotifier.from_environ().enabled
    finally:
        if saved is not None:
            os.environ["NOTIFY_SOCKET"] = saved
