"""The namespace test hosts themselves work: ssh into each, TCP between them, hidden paths, SetEnv, another ssh
port, full cleanup; where they cannot be made, a test skips, or fails in CI."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from namespace_hosts import namespace_hosts, require_namespace_hosts

LISTENER = """
import socket, sys
server = socket.create_server((sys.argv[1], 0))
server.settimeout(20)
print(server.getsockname()[1], flush=True)
connection, _ = server.accept()
connection.sendall(b"hello from host1")
connection.close()
"""

CLIENT = "import socket; print(socket.create_connection(('{host}', {port}), timeout=5).recv(100).decode())"


@pytest.mark.slow  # a process of its own, seconds
def test_two_hosts(tmp_path: Path) -> None:
    require_namespace_hosts()
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "weights.bin").write_bytes(b"x")
    shadow = "/opt/forklift shadow"  # a space: SetEnv values are quoted
    with namespace_hosts(tmp_path / "hosts", 2, env={2: {"FORKLIFT_SHADOW": shadow}}, hidden={2: [secret]}) as hosts:
        assert hosts.names == ["host1", "host2"]
        address1, address2 = hosts.addresses["host1"], hosts.addresses["host2"]
        assert address1.startswith("198.18.0.") and address2.startswith("198.18.0.")

        # ssh works with the written config, as a launcher uses it, and each host is its own machine
        result = hosts.run("host1", "hostname; ip -4 -o addr show dev eth0", check=True)
        name, addresses = result.stdout.split("\n", 1)
        assert name == "host1"
        assert f"inet {address1}/" in addresses
        plain = subprocess.run(
            ["ssh", "-F", str(hosts.ssh_config), "host2", "hostname"], capture_output=True, text=True, timeout=30
        )
        assert plain.stdout.strip() == "host2", plain.stderr

        # host2 reaches a listener on host1 over TCP, by name (each host's /etc/hosts) and by address
        listener = hosts.popen_in(
            "host1",
            [sys.executable, "-c", LISTENER, address1],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        assert listener.stdout is not None
        port = int(listener.stdout.readline())
        client = CLIENT.format(host="host1", port=port)
        result = hosts.run("host2", f'python3 -c "{client}"', check=True)
        assert result.stdout.strip() == "hello from host1"
        assert listener.wait(timeout=10) == 0

        # the hidden directory is empty on host2 only; the SetEnv value reaches host2's sessions only
        weights = secret / "weights.bin"
        assert hosts.run("host1", f"test -e {weights}").returncode == 0
        assert hosts.run("host2", f"test -e {weights}").returncode == 1
        assert hosts.exec_in("host2", ["test", "-e", weights]).returncode == 1
        assert hosts.run("host2", 'echo "$FORKLIFT_SHADOW"').stdout == shadow + "\n"
        assert hosts.run("host1", 'echo "${FORKLIFT_SHADOW-unset}"').stdout == "unset\n"

        # something left running on a host is killed with it
        hosts.run("host1", "nohup sleep 600 >/dev/null 2>&1 &", check=True)
        deadline = time.monotonic() + 5
        while len(hosts.pids("host1")) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        namespaces = list(hosts.namespaces.values())
        bridge_address = hosts.gateway

    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=20).stdout
    assert not any(ns in listed for ns in namespaces), listed
    links = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, timeout=20).stdout
    assert f"{bridge_address}/" not in links


def test_same_block_again(tmp_path: Path) -> None:
    """Uses one after the other work: the first one's cleanup leaves nothing in the way. The second's sshd listens
    on another port, which only a client told it reaches."""
    require_namespace_hosts()
    with namespace_hosts(tmp_path / "a", 1) as first:
        taken = first.addresses["host1"]
    with namespace_hosts(tmp_path / "b", 1, port=2222) as second:
        assert second.run("host1", "hostname", check=True).stdout == "host1\n"
        plain = subprocess.run(["ssh", "-F", str(second.ssh_config), "host1", "true"], capture_output=True,
                               text=True, timeout=30)  # fmt: skip
        assert plain.returncode == 255 and "port 22: Connection refused" in plain.stderr, plain.stderr
    shown = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, timeout=20).stdout
    assert f"{taken}/" not in shown and f"{second.gateway}/" not in shown


@pytest.mark.parametrize("ci", ["true", None])
@pytest.mark.parametrize("missing", ["root", "nsenter", "/usr/sbin/sshd"])
def test_what_is_missing_skips_the_test_or_fails_it_in_ci(monkeypatch: pytest.MonkeyPatch, ci: str | None,
                                                          missing: str) -> None:  # fmt: skip
    """A CI run that skipped these tests would pass having tested no launcher: there they fail, with the reason."""
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    monkeypatch.setattr(os, "geteuid", lambda: 1000 if missing == "root" else 0)
    monkeypatch.setattr(shutil, "which", lambda tool: None if tool == missing else f"/usr/bin/{tool}")
    monkeypatch.setattr(os, "access", lambda path, mode: path != missing)
    said = {"root": "namespace hosts need root", "nsenter": "need `nsenter`, which is not installed",
            "/usr/sbin/sshd": "need /usr/sbin/sshd, which is not installed"}[missing]  # fmt: skip
    with pytest.raises(BaseException) as outcome:  # skip and fail are BaseExceptions, which a narrower class lets by
        require_namespace_hosts()
    assert type(outcome.value) is (pytest.fail.Exception if ci else pytest.skip.Exception)
    assert said in str(outcome.value)
