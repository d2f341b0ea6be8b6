#!/usr/bin/env python3
"""Calls under faults (SPEC §15): a real supervisor with three TestKit plugins, callers calling
without pause, and a fault every 1-5 s, for N minutes; then what was lost.

    scripts/chaos.py [--minutes 3] [--callers 4] [--seed N] [--bin DIR]

The plugins: c.idem (its `echo` idempotent), c.once (its `tally` not: it notes what it ran in its
data folder) and c.user (depends on c.idem; its `call` idempotent, used only to call c.idem's
`echo`, over its peer link). Each caller, with a client of its own (its calls to a plugin go over
its direct link after the first), calls in turn c.idem's `echo`, c.user's `call` of c.idem's
`echo`, and c.once's `tally` of a number of its own.

The faults, chosen at random: SIGKILL, SIGSEGV or SIGSTOP of one plugin's worker (a stopped one is
found by the watchdog), a restart of a plugin, an update of one (its bundle's version raised, then
`supervisor reload`), SIGKILL of the fork server, an upgrade in place (`supervisor upgrade`, to the
same binary: the workers taken over must keep the guarantee; one refused for want of a quiet moment
counts too). The supervisor's counts of replayed and retried calls start again at each upgrade.

What must hold, checked at the end (exit 1 otherwise): no idempotent call failed; each failed
`tally` failed with `started` (its plugin may have run it); no `tally` ran twice, and each answered
one ran. `--bin` is the build's folder (default: `swift build --show-bin-path`), which holds
`supervisor` and `libTestKit.so` (./scripts/test.sh or `swift build` builds them).
"""
import argparse
import collections
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "clients", "python", "src"))
from sandboxed_plugins import Client, PluginError  # noqa: E402


def bundle(plugins, identifier, testkit, extra=None):
    folder = os.path.join(plugins, identifier)
    os.makedirs(folder)
    library = os.path.join(folder, "libTestKit.so")
    try:
        os.link(testkit, library)
    except OSError:
        shutil.copy(testkit, library)
    manifest = {"identifier": identifier, "version": "1.0.0", "library": "libTestKit.so", "restart": "always"}
    manifest.update(extra or {})
    with open(os.path.join(folder, "plugin.json"), "w") as f:
        json.dump(manifest, f)


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.ok = collections.Counter()
        self.failed = collections.Counter()
        self.examples = []
        self.tallied = []
        self.started_failures = 0

    def add_ok(self, kind):
        with self.lock:
            self.ok[kind] += 1

    def add_failure(self, kind, error):
        with self.lock:
            self.failed[kind] += 1
            if len(self.examples) < 5:
                self.examples.append(f"{kind}: {error}")


def caller(lane, socket, tally, stop, deadline):
    client = Client(socket=socket)
    n = 0
    while not stop.is_set():
        n += 1
        for kind, target, method, params in (("echo", "c.idem", "echo", [n]),
                                              ("echo via c.user", "c.user", "call", {"target": "c.idem", "method": "echo", "params": [n]})):
            try:
                answer = client.call(target, method, params, timeout=deadline)
                if answer == [n]:
                    tally.add_ok(kind)
                else:
                    tally.add_failure(kind, f"answered {answer!r} for {n}")
            except PluginError as error:
                tally.add_failure(kind, error)
        value = lane * 10_000_000 + n
        try:
            if client.call("c.once", "tally", value, timeout=deadline) == value:
                with tally.lock:
                    tally.tallied.append(value)
            else:
                tally.add_failure("tally", f"a wrong answer for {value}")
        except PluginError as error:
            if error.code == "unavailable" and error.started:
                with tally.lock:
                    tally.started_failures += 1
            else:
                tally.add_failure("tally", error)
    client.close()


def status(socket):
    try:
        with Client(socket=socket) as client:
            return {p["identifier"]: p for p in client.status()}
    except (OSError, PluginError):
        return {}


def fork_server(supervisor_pid):
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        if name == "plugin-forksrv" and int(fields[1]) == supervisor_pid and fields[0] != "Z":
            return int(entry)
    return None


def fault(rng, supervisor, home, socket, plugins, supervisor_pid):
    plugin = rng.choice(["c.idem", "c.once", "c.user"])
    kind = rng.choice(["SIGKILL", "SIGKILL", "SIGSEGV", "SIGSTOP", "restart", "update", "fork server", "upgrade"])
    if kind == "upgrade":
        done = subprocess.run([supervisor, "upgrade", "--home", home], capture_output=True, text=True, timeout=60)
        return "upgrade" if done.returncode == 0 else f"upgrade-refused ({done.stderr.strip()[:80]})"
    if kind == "restart":
        try:
            with Client(socket=socket) as client:
                client.restart(plugin)
        except (OSError, PluginError):
            pass
        return f"restart {plugin}"
    if kind == "update":
        # A new version of its bundle, picked up by `supervisor reload` (a zero-drop update).
        manifest_path = os.path.join(plugins, plugin, "plugin.json")
        with open(manifest_path) as f:
            manifest = json.load(f)
        major, minor, patch = (int(x) for x in manifest["version"].split("."))
        manifest["version"] = f"{major}.{minor}.{patch + 1}"
        with open(manifest_path, "w") as f:
            json.dump(manifest, f)
        subprocess.run([supervisor, "reload", "--home", home], capture_output=True, timeout=60)
        return f"update {plugin} to {manifest['version']}"
    if kind == "fork server":
        pid = fork_server(supervisor_pid)
        if pid:
            os.kill(pid, signal.SIGKILL)
        return f"fork-server SIGKILL ({pid})"
    pid = status(socket).get(plugin, {}).get("pid")
    if pid:
        os.kill(pid, getattr(signal, kind))
    return f"{kind} {plugin}'s worker ({pid})"


def resent(supervisor, home):
    """plugin_calls_replayed_total and plugin_calls_retried_total, summed over the plugins."""
    text = subprocess.run([supervisor, "metrics", "--home", home], capture_output=True, text=True, timeout=30).stdout
    sums = collections.Counter()
    for line in text.splitlines():
        for name in ("plugin_calls_replayed_total", "plugin_calls_retried_total"):
            if line.startswith(name + "{"):
                sums[name] += float(line.rsplit(" ", 1)[1])
    return int(sums["plugin_calls_replayed_total"]), int(sums["plugin_calls_retried_total"])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=3)
    parser.add_argument("--callers", type=int, default=4)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--bin", default=None)
    args = parser.parse_args()
    bin_dir = args.bin or subprocess.run(["swift", "build", "--show-bin-path"], cwd=ROOT, capture_output=True, text=True,
                                         check=True).stdout.strip()
    supervisor, testkit = os.path.join(bin_dir, "supervisor"), os.path.join(bin_dir, "libTestKit.so")
    for path in (supervisor, testkit):
        if not os.path.exists(path):
            sys.exit(f"chaos: {path} is missing: build first (./scripts/test.sh, or swift build)")
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    work = tempfile.mkdtemp(prefix="sp-chaos-")
    plugins, home = os.path.join(work, "plugins"), os.path.join(work, "home")
    os.makedirs(home)
    bundle(plugins, "c.idem", testkit, {"idempotent": ["echo"]})
    bundle(plugins, "c.once", testkit)
    bundle(plugins, "c.user", testkit, {"idempotent": ["call"], "dependencies": ["c.idem"]})
    config = os.path.join(work, "config.json")
    with open(config, "w") as f:
        # Restarts are not what is measured: no intensity limit in the way, short backoffs; a
        # stopped worker is found within a second.
        json.dump({"restartLimit": 1000000, "restartBackoffBaseMs": 1, "restartBackoffMaxMs": 50,
                   "pingIntervalMs": 250, "pingTimeoutMs": 750}, f)
    log = open(os.path.join(work, "supervisor.log"), "w")
    process = subprocess.Popen([supervisor, "start", "--plugins", plugins, "--home", home, "--config", config],
                               stdout=log, stderr=subprocess.STDOUT)
    socket = os.path.join(home, "supervisor.sock")
    try:
        for _ in range(300):
            if os.path.exists(socket) and [p.get("state") for p in status(socket).values()] == ["running"] * 3:
                break
            time.sleep(0.1)
        else:
            sys.exit(f"chaos: the supervisor did not come up (log: {log.name})")
        tally, stop = Tally(), threading.Event()
        threads = [threading.Thread(target=caller, args=(lane, socket, tally, stop, 60)) for lane in range(args.callers)]
        for thread in threads:
            thread.start()
        faults = []
        began = time.monotonic()
        while time.monotonic() - began < args.minutes * 60:
            time.sleep(rng.uniform(1, 5))
            faults.append(fault(rng, supervisor, home, socket, plugins, process.pid))
        # Calls flow again after the last fault before the callers stop.
        time.sleep(3)
        stop.set()
        for thread in threads:
            thread.join()
        # What `tally` ran, from the file it appends to in its data folder (after minutes of calls
        # it is large, and `ran` would read it on the worker's I/O thread past the watchdog's limit).
        with open(os.path.join(home, "data", "c.once", "ran")) as f:
            ran = [int(line) for line in f if line.strip()]
        twice = sorted(v for v, c in collections.Counter(ran).items() if c > 1)
        missing = sorted(set(tally.tallied) - set(ran))
        calls = sum(tally.ok.values()) + sum(tally.failed.values()) + len(tally.tallied) + tally.started_failures
        kinds = collections.Counter(f.split(" ")[0] for f in faults)
        replayed, retried = resent(supervisor, home)
        print(f"chaos (seed {seed}): {args.minutes:g} min, {args.callers} callers, {len(faults)} faults "
              f"({', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))})")
        print(f"  {calls} calls: echo {tally.ok['echo']} ok, echo via c.user {tally.ok['echo via c.user']} ok, "
              f"tally {len(tally.tallied)} ok and {tally.started_failures} failed as started")
        print(f"  idempotent calls failed: {sum(tally.failed[k] for k in ('echo', 'echo via c.user'))}; "
              f"tally failed otherwise: {tally.failed['tally']}; ran twice: {len(twice)}; answered but not run: {len(missing)}")
        print(f"  the supervisor replayed {replayed} calls (never started) and retried {retried} (started, idempotent)")
        for example in tally.examples:
            print(f"  e.g. {example}")
        good = not tally.failed and not twice and not missing
        print("  held" if good else f"  DID NOT HOLD (log: {log.name})")
        if good:
            shutil.rmtree(work, ignore_errors=True)
        return 0 if good else 1
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


if __name__ == "__main__":
    sys.exit(main())
