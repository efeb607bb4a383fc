"""Two or three "test hosts" on this one machine, for tests of launchers that ssh into several hosts.

Each host is a Linux network namespace behind a bridge that this module creates, running its own sshd, so that
`ssh -F ROOT/ssh_config host1 CMD` works and processes on different hosts reach each other over TCP (e.g. a
torch.distributed rendezvous). Nothing of the machine's own is touched: the addresses are in 198.18.0.0/24 (the
benchmarking range, never routed), the bridge, veths and namespaces are made here and removed on exit, the sshd's
run on their own configs, keys and pid files under ROOT, and ~/.ssh and /etc/ssh are not used.

    with namespace_hosts(tmp_path, 2, env={2: {"PYTHONPATH": str(shadow)}}, hidden={2: [data_dir]}) as hosts:
        hosts.run("host1", "hostname")  # "host1"
        forklift("run", "-H", ",".join(hosts.names), "--ssh-config", hosts.ssh_config, ...)

Each host also has its own hostname (UTS namespace) and /etc/hosts (bind-mounted in its own mount namespace) that
resolves every host's name to its address, as on a real cluster; the test process itself cannot resolve them (use
`Hosts.addresses` or the ssh config). Sessions get sshd's default PATH plus `env[i]`; root's ~/.bashrc is read by
bash as for any ssh command.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NoReturn

from core_parts import missing

__all__ = ["Hosts", "namespace_hosts", "require_namespace_hosts"]

SSHD = "/usr/sbin/sshd"
SSH = "/usr/bin/ssh"
MAX_HOSTS = 9
# 198.18.0.0/24 cut into eight /27 blocks so that uses running at the same time (two pytest processes) get
# different ones; block 0 (bridge .1, host i at .10+i) is the one a lone use gets.
_NET = "198.18.0"
_BLOCK = 32
_PREFIX = 27
_LOCK_NAME = b"\0forklift-namespace-hosts"  # abstract unix socket: a machine-wide mutex that leaves nothing behind
_uses = itertools.count(1)


def require_namespace_hosts() -> None:
    """Skip the test (with the reason) where namespace hosts cannot be made: they need root, `ip`, `unshare`,
    `nsenter`, `ssh-keygen`, `ssh` and `sshd`. In CI (CI=true) fail it instead: CI provides them, and a skip
    there would pass without testing anything."""
    if os.geteuid() != 0:
        _cannot("namespace hosts need root (network namespaces, a bridge, sshd)")
    for tool in ("ip", "unshare", "nsenter", "ssh-keygen", "mount"):
        if shutil.which(tool) is None:
            _cannot(f"namespace hosts need `{tool}`, which is not installed")
    for binary in (SSHD, SSH):
        if not os.access(binary, os.X_OK):
            _cannot(f"namespace hosts need {binary}, which is not installed")
    if not Path("/proc/self/ns/net").exists():
        _cannot("this kernel has no network namespaces")


def _cannot(reason: str) -> NoReturn:
    missing(reason)


@dataclass
class Hosts:
    """The running hosts: names, addresses, namespaces, the ssh client config, and ways to run commands on them."""

    names: list[str]
    addresses: dict[str, str]
    namespaces: dict[str, str]
    ssh_config: Path
    root: Path
    gateway: str  # the bridge's address in the root namespace: the test process talks to the hosts from it
    sshd_pids: dict[str, int]
    port: int = 22  # every sshd's; another is not in `ssh_config` (a launcher must be told it)
    _spawned: list[subprocess.Popen[Any]] = field(default_factory=list, repr=False)

    def ssh_args(self, name: str, command: str) -> list[str]:
        """The ssh command line that runs `command` (one shell string, as ssh takes it) on host `name`."""
        self._check(name)
        return [SSH, "-F", str(self.ssh_config), *(["-p", str(self.port)] if self.port != 22 else []), name, command]

    def run(
        self, name: str, command: str, *, timeout: float = 30, check: bool = False, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """Run a shell command on host `name` through ssh, as a launcher would, its output captured."""
        result = subprocess.run(
            self.ssh_args(name, command),
            capture_output=True,
            text=True,
            timeout=timeout,
            input=input,
            stdin=None if input is not None else subprocess.DEVNULL,
        )
        if check and result.returncode != 0:
            raise AssertionError(f"ssh {name} {command!r} exited {result.returncode}\n{result.stdout}\n{result.stderr}")
        return result

    def nsenter_args(self, name: str, args: Sequence[str | Path]) -> list[str]:
        """The command line that runs `args` in host `name`'s namespaces: its network, its mounts (so hidden paths
        are hidden) and its hostname, i.e. what an ssh session there sees, without going through sshd."""
        self._check(name)
        pid = str(self.sshd_pids[name])
        return ["nsenter", "-t", pid, "--net", "--mount", "--uts", "--", *map(str, args)]

    def exec_in(
        self, name: str, args: Sequence[str | Path], *, timeout: float = 30, check: bool = False
    ) -> subprocess.CompletedProcess[str]:
        """Run `args` directly in host `name` (no ssh), output captured: e.g. to find or kill a process there."""
        result = subprocess.run(
            self.nsenter_args(name, args), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
        if check and result.returncode != 0:
            raise AssertionError(f"{name}: {list(args)} exited {result.returncode}\n{result.stdout}\n{result.stderr}")
        return result

    def popen_in(self, name: str, args: Sequence[str | Path], **kwargs: Any) -> subprocess.Popen[Any]:
        """Start `args` in the background in host `name` (no ssh), e.g. a listener; it is killed and reaped when
        the hosts go away, if the test has not done so."""
        kwargs.setdefault("stdin", subprocess.DEVNULL)
        process = subprocess.Popen(self.nsenter_args(name, args), **kwargs)
        self._spawned.append(process)
        return process

    def pids(self, name: str) -> list[int]:
        """The processes now running in host `name`'s network namespace (sshd included)."""
        self._check(name)
        return _netns_pids(self.namespaces[name])

    def _check(self, name: str) -> None:
        if name not in self.addresses:
            raise KeyError(f"no host {name!r}; the hosts are {self.names}")


@contextlib.contextmanager
def namespace_hosts(
    root: Path,
    count: int = 2,
    *,
    env: dict[int, dict[str, str]] | None = None,
    hidden: dict[int, list[Path]] | None = None,
    port: int = 22,
    ready_timeout: float = 10,
) -> Iterator[Hosts]:
    """`count` hosts host1..hostN, each a network namespace with its own sshd, reachable from the test process and
    from each other; everything is removed on exit, also when making them fails half way.

    `root` (an empty or new directory, e.g. tmp_path) holds the keys, configs, logs and `ssh_config`. `env[i]` are
    environment variables every ssh session on host i gets (sshd's SetEnv), e.g. a PYTHONPATH that shadows a
    package as a different installed version would. `hidden[i]` are directories host i does not see: an empty
    tmpfs covers each in host i's own mount namespace (a tmpfs covers directories only, so hide a file's
    directory). `port`: where every sshd listens; one other than 22 is left out of `ssh_config`, so that only a
    client told it (`ssh -p`, a launcher's `--ssh-port`) gets in. Skips the test where hosts cannot be made (see
    `require_namespace_hosts`).
    """
    require_namespace_hosts()
    env = env or {}
    hidden = hidden or {}
    if not 1 <= count <= MAX_HOSTS:
        raise ValueError(f"count must be 1..{MAX_HOSTS}, not {count}")
    for mapping, what in ((env, "env"), (hidden, "hidden")):
        unknown = set(mapping) - set(range(1, count + 1))
        if unknown:
            raise ValueError(f"{what} names hosts {sorted(unknown)}; the hosts are 1..{count}")
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    setenv_lines = {i: _setenv_line(values) for i, values in env.items()}
    hidden_dirs = {i: _hidden_dirs(paths, root) for i, paths in hidden.items()}

    use = next(_uses)
    tag = f"{os.getpid():x}x{use:x}"  # pid and counter: unique per use, also among processes
    names = [f"host{i}" for i in range(1, count + 1)]
    bridge = f"fb{tag}"
    veths = {name: f"fv{tag}-{i}" for i, name in enumerate(names, 1)}
    namespaces = {name: f"forklift-{os.getpid()}-{use}-{name}" for name in names}
    for link in (bridge, *veths.values()):
        if len(link) > 15:
            raise RuntimeError(f"interface name {link!r} is longer than Linux's 15 characters")

    cleanup = _Cleanup()
    try:
        _make_keys(root, names)
        with _subnet_lock():
            block = _free_block()
            base = block * _BLOCK
            gateway = f"{_NET}.{base + 1}"
            cleanup.push(f"delete bridge {bridge}", partial(_ip_quiet, "link", "del", bridge))
            _ip("link", "add", bridge, "type", "bridge", "forward_delay", "0", "stp_state", "0")
            _ip("addr", "add", f"{gateway}/{_PREFIX}", "dev", bridge)
        _ip("link", "set", bridge, "up")
        addresses = {name: f"{_NET}.{base + 10 + i}" for i, name in enumerate(names, 1)}

        hosts_file = root / "etc-hosts"
        hosts_file.write_text(
            "127.0.0.1 localhost\n::1 localhost ip6-localhost ip6-loopback\n"
            + "".join(f"{addresses[name]} {name}\n" for name in names)
        )
        for name in names:
            ns, veth = namespaces[name], veths[name]
            cleanup.push(f"delete namespace {ns}", partial(_ip_quiet, "netns", "del", ns))
            cleanup.push(f"kill the processes in {ns}", partial(_kill_netns_processes, ns))
            _ip("netns", "add", ns)
            cleanup.push(f"delete veth {veth}", partial(_ip_quiet, "link", "del", veth))
            _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", veth, "master", bridge, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "addr", "add", f"{addresses[name]}/{_PREFIX}", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")

        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation dir; left for others
        sshds: dict[str, subprocess.Popen[bytes]] = {}
        for i, name in enumerate(names, 1):
            config = _write_sshd_config(root, name, addresses[name], port, setenv_lines.get(i))
            script = (
                'set -e; cfg=$1; hosts=$2; name=$3; shift 3; echo "$name" > /proc/sys/kernel/hostname; '
                'mount --bind "$hosts" /etc/hosts; '
                'for p in "$@"; do mount -t tmpfs -o size=1m,mode=0755 forklift-hidden "$p"; done; '
                f'exec {SSHD} -D -e -f "$cfg"'
            )
            args = ["ip", "netns", "exec", namespaces[name], "unshare", "--mount", "--uts", "--propagation", "private"]
            args += ["/bin/sh", "-c", script, "sh", str(config), str(hosts_file), name]
            args += [str(p) for p in hidden_dirs.get(i, [])]
            with (root / name / "sshd.log").open("wb") as log:
                process = subprocess.Popen(
                    args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
                )
            sshds[name] = process
            cleanup.push(f"stop sshd of {name}", partial(_stop, process))
        deadline = time.monotonic() + ready_timeout
        for name in names:
            _wait_for_sshd(name, (addresses[name], port), sshds[name], root / name / "sshd.log", deadline)

        ssh_config = root / "ssh_config"
        _write_ssh_config(ssh_config, addresses, root / "client" / "id_ed25519")
        hosts = Hosts(
            names=names,
            addresses=addresses,
            namespaces=namespaces,
            ssh_config=ssh_config,
            root=root,
            gateway=gateway,
            sshd_pids={name: process.pid for name, process in sshds.items()},
            port=port,
        )
        cleanup.push("stop the processes the test started", partial(_stop_all, hosts._spawned))
        yield hosts
    except BaseException:
        cleanup.run(raise_errors=False)
        raise
    cleanup.run(raise_errors=True)


class _Cleanup:
    """Undo steps, run last-made first; every step runs even when one before it fails."""

    def __init__(self) -> None:
        self.steps: list[tuple[str, Callable[[], object]]] = []

    def push(self, what: str, step: Callable[[], object]) -> None:
        self.steps.append((what, step))

    def run(self, *, raise_errors: bool) -> None:
        errors = []
        while self.steps:
            what, step = self.steps.pop()
            try:
                step()
            except Exception as error:  # go on: the later steps free what this one could not
                errors.append(f"{what}: {error}")
        if errors and raise_errors:
            raise RuntimeError("removing the namespace hosts failed:\n" + "\n".join(errors))


def _ip(*args: str) -> None:
    """`ip ARGS`, failing with what it printed."""
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
    if result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip() or result.stdout.strip()}")


def _ip_quiet(*args: str) -> None:
    """`ip ARGS` for removing something, where "it is already gone" is success (a veth goes with its namespace)."""
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=20)
    gone = ("Cannot find device", "No such file or directory", "does not exist")
    if result.returncode != 0 and not any(text in result.stderr for text in gone):
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")


@contextlib.contextmanager
def _subnet_lock(timeout: float = 20) -> Iterator[None]:
    """Hold the machine-wide lock on choosing a block of 198.18.0.0/24, so that two uses at once take two blocks;
    an abstract unix socket: the kernel drops it when its holder dies, and it leaves no file behind."""
    lock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                lock.bind(_LOCK_NAME)
                break
            except OSError as error:
                if error.errno != errno.EADDRINUSE or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        yield
    finally:
        lock.close()


def _free_block() -> int:
    """The lowest /27 block of 198.18.0.0/24 with no address or route of the root namespace in it."""
    shown = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True, timeout=20).stdout
    shown += subprocess.run(["ip", "-4", "route", "show"], capture_output=True, text=True, timeout=20).stdout
    used = {int(last) // _BLOCK for last in re.findall(r"\b198\.18\.0\.(\d+)\b", shown)}
    for block in range(256 // _BLOCK):
        if block not in used:
            return block
    raise RuntimeError(f"no free /{_PREFIX} block left in 198.18.0.0/24 (leftovers of killed test runs?)")


def _setenv_line(values: dict[str, str]) -> str:
    """The sshd_config SetEnv line for `values`; each NAME=value is double-quoted, so values may hold spaces."""
    words = []
    for name, value in values.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise ValueError(f"not an environment variable name: {name!r}")
        if any(char in value for char in '"\\\n\r\0'):
            raise ValueError(f"sshd_config cannot carry the value of {name}: {value!r}")
        words.append(f'"{name}={value}"')
    return "SetEnv " + " ".join(words) if words else ""


def _hidden_dirs(paths: list[Path], root: Path) -> list[Path]:
    """The directories to cover, checked: a tmpfs can only cover a directory, and covering `root` would hide the
    host's own sshd config and keys."""
    dirs = []
    for path in paths:
        path = Path(path).resolve()
        if not path.is_dir():
            raise ValueError(f"hidden path {path} is not a directory (hide the directory a file is in)")
        if root.is_relative_to(path):
            raise ValueError(f"hidden path {path} holds {root}, where the host's sshd config is")
        dirs.append(path)
    return dirs


def _keygen(path: Path, comment: str) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=20,
    )


def _make_keys(root: Path, names: list[str]) -> None:
    """A host key per host and one client key pair, authorized on every host."""
    client = root / "client"
    client.mkdir(exist_ok=True)
    _keygen(client / "id_ed25519", "forklift-test-client")
    (client / "authorized_keys").write_text((client / "id_ed25519.pub").read_text())
    for name in names:
        (root / name).mkdir(exist_ok=True)
        _keygen(root / name / "ssh_host_ed25519_key", f"forklift-test-{name}")


def _write_sshd_config(root: Path, name: str, address: str, port: int, setenv: str | None) -> Path:
    """An sshd_config of this host's own: nothing from /etc/ssh, keys only, root allowed."""
    here = root / name
    lines = [
        f"ListenAddress {address}",
        f"Port {port}",
        f"HostKey {here / 'ssh_host_ed25519_key'}",
        f"PidFile {here / 'sshd.pid'}",
        f"AuthorizedKeysFile {root / 'client' / 'authorized_keys'}",
        "PermitRootLogin prohibit-password",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",
        "UseDNS no",
        "PrintMotd no",
        "PrintLastLog no",
        "X11Forwarding no",
        "LoginGraceTime 20",
        "MaxStartups 100:30:200",  # a launcher opens many sessions at once; sshd's 10 would drop some
        "MaxSessions 100",
        "LogLevel INFO",
    ]
    if setenv:
        lines.append(setenv)
    config = here / "sshd_config"
    config.write_text("\n".join(lines) + "\n")
    return config


def _write_ssh_config(path: Path, addresses: dict[str, str], identity: Path) -> None:
    """The client config for `ssh -F PATH hostN`: this test's key only, no known_hosts, no prompts."""
    blocks = [f"Host {name}\n    HostName {address}\n" for name, address in addresses.items()]
    blocks.append(
        "Host *\n"
        "    User root\n"
        f"    IdentityFile {identity}\n"
        "    IdentitiesOnly yes\n"
        "    IdentityAgent none\n"
        "    StrictHostKeyChecking no\n"
        "    UserKnownHostsFile /dev/null\n"
        "    GlobalKnownHostsFile /dev/null\n"
        "    LogLevel ERROR\n"
        "    BatchMode yes\n"
        "    ConnectTimeout 5\n"
        "    ConnectionAttempts 1\n"
        "    ControlMaster no\n"
        "    ControlPath none\n"
    )
    path.write_text("\n".join(blocks))


def _wait_for_sshd(
    name: str, listen: tuple[str, int], process: subprocess.Popen[bytes], log: Path, deadline: float
) -> None:
    """Return once sshd of host `name` accepts TCP connections at `listen`; fail with its log if it exits or never
    does."""
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"sshd of {name} exited {process.returncode}:\n{log.read_text(errors='replace')}")
        try:
            with socket.create_connection(listen, timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"sshd of {name} did not listen on {listen[0]}:{listen[1]} in time:\n"
                    f"{log.read_text(errors='replace')}"
                ) from None
            time.sleep(0.05)


def _stop(process: subprocess.Popen[Any], grace: float = 5) -> None:
    """Terminate and reap a process of ours (SIGKILL after `grace` seconds)."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=grace)


def _stop_all(processes: list[subprocess.Popen[Any]]) -> None:
    for process in processes:
        _stop(process)


def _netns_pids(ns: str) -> list[int]:
    result = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True, timeout=20)
    return [int(word) for word in result.stdout.split()]


def _kill_netns_processes(ns: str, grace: float = 5) -> None:
    """SIGTERM, then SIGKILL, everything still in namespace `ns` (ssh sessions, what they started), and wait
    until none is left, so that deleting the namespace really frees it."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, grace)):
        pids = _netns_pids(ns)
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while _netns_pids(ns) and time.monotonic() < deadline:
            time.sleep(0.05)
    left = _netns_pids(ns)
    if left:
        raise RuntimeError(f"processes {left} in {ns} survived SIGKILL")
