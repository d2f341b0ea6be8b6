"""A pytest fixture that starts a real supervisor over given plugin folders, on a temporary home,
so a team's integration tests can call their plugins, crash them on purpose and assert what
happens (docs/host.md, "Testing with Python")::

    def test_restarts_after_a_crash(plugin_supervisor):
        sup = plugin_supervisor(["build/plugins"])
        with sup.client.events("com.example.greeter") as events:
            sup.crash("com.example.greeter")
            events.wait_for(lambda e: e["event"] == "exited")
            events.wait_for(lambda e: e["event"] == "started")
        assert sup.client.call("com.example.greeter", "greet", {"name": "Ada"})

The ``supervisor`` executable is ``--supervisor-bin``, else ``$SUPERVISOR_BIN``, else ``supervisor``
on ``PATH``.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from typing import Iterable, List, Optional, Sequence

import pytest

from .client import Client
from .errors import PluginError


def pytest_addoption(parser: "pytest.Parser") -> None:
    parser.addoption("--supervisor-bin", action="store", default=None,
                     help="the supervisor executable the plugin_supervisor fixture runs (default: $SUPERVISOR_BIN, else `supervisor` on PATH)")


class RunningSupervisor:
    """One ``supervisor start`` on a home of its own. ``client`` is connected to it; ``log`` is
    what it logged so far."""

    def __init__(self, executable: str, plugin_folders: Sequence[str], home: str, args: Sequence[str],
                 ready_timeout: float, environment: Optional[dict]) -> None:
        self.home = home
        self.socket = os.path.join(home, "supervisor.sock")
        self.log_path = os.path.join(home, "supervisor.log")
        command = [executable, "start", "--home", home, "--socket", self.socket]
        for folder in plugin_folders:
            command += ["--plugins", os.path.abspath(folder)]
        command += list(args)
        env = dict(os.environ if environment is None else environment)
        env.pop("SUPERVISOR_SOCKET", None)
        env.pop("NOTIFY_SOCKET", None)
        self._log = open(self.log_path, "wb")
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=self._log, env=env)
        self.ready_line = self._await_ready(ready_timeout)
        self._client: Optional[Client] = None

    def _await_ready(self, timeout: float) -> str:
        found: List[str] = []

        def read() -> None:
            assert self.process.stdout is not None
            for raw in self.process.stdout:
                line = raw.decode("utf-8", "replace").strip()
                if "ready" in line and not found:
                    found.append(line)

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        deadline = time.monotonic() + timeout
        while not found:
            if self.process.poll() is not None:
                raise RuntimeError(f"the supervisor exited ({self.process.returncode}) before it was ready:\n{self.log}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the supervisor was not ready within {timeout} s:\n{self.log}")
            time.sleep(0.01)
        return found[0]

    @property
    def client(self) -> Client:
        if self._client is None:
            self._client = Client(socket=self.socket)
        return self._client

    @property
    def log(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def status(self, plugin: str) -> dict:
        for entry in self.client.status():
            if entry["identifier"] == plugin:
                return entry
        raise PluginError("notFound", f"no plugin {plugin} is installed")

    def pid(self, plugin: str) -> int:
        pid = self.status(plugin).get("pid")
        if pid is None:
            raise PluginError("unavailable", f"{plugin} has no worker")
        return int(pid)

    def crash(self, plugin: str, sig: int = signal.SIGSEGV) -> int:
        """Sends ``sig`` (SIGSEGV by default) to the plugin's worker; returns its pid."""
        pid = self.pid(plugin)
        os.kill(pid, sig)
        return pid

    def wait_until(self, predicate, timeout: float = 10.0, what: str = "the condition") -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} did not hold within {timeout} s")
            time.sleep(0.01)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM, then its exit status (SIGKILL after ``timeout``)."""
        if self._client is not None:
            self._client.close()
            self._client = None
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode


@pytest.fixture
def plugin_supervisor(request: "pytest.FixtureRequest"):
    """A factory: ``plugin_supervisor(plugin_folders, args=(), ready_timeout=30, home=None)``
    starts a supervisor and returns a ``RunningSupervisor``; every one started is stopped after
    the test, and its home removed."""
    executable = request.config.getoption("--supervisor-bin") or os.environ.get("SUPERVISOR_BIN") or shutil.which("supervisor")
    if not executable:
        pytest.skip("no supervisor executable: give --supervisor-bin, set $SUPERVISOR_BIN, or put `supervisor` on PATH")
    started: List[RunningSupervisor] = []
    homes: List[str] = []

    def start(plugin_folders: Iterable[str], args: Sequence[str] = (), ready_timeout: float = 30.0,
              home: Optional[str] = None, environment: Optional[dict] = None) -> RunningSupervisor:
        if home is None:
            home = tempfile.mkdtemp(prefix="sp-home-")
            homes.append(home)
        running = RunningSupervisor(executable, list(plugin_folders), home, args, ready_timeout, environment)
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()
    for home in homes:
        shutil.rmtree(home, ignore_errors=True)
