#!/usr/bin/env python3
"""What a burst of first calls to inactive plugins costs everything else (SPEC §16).

N `activation: onCall` copies of the C example plugin and one eager copy (sandbox on, fork
server), started with the release build. N first calls go in one write on one connection; while
they are activated, `status` and a call to the running plugin are each asked every 5 ms on two
other connections. Prints how long the N took to be answered and the worst `status` and call.

    scripts/activation-burst.py [N] [--bin DIR]     (default 800, .build/release: swift build -c release first)
"""
import argparse, json, os, shutil, socket, struct, subprocess, tempfile, threading, time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("plugins", nargs="?", type=int, default=800)
parser.add_argument("--bin", default=os.path.join(root, ".build/release"))
args = parser.parse_args()
n = args.plugins

work = tempfile.mkdtemp(prefix="burst-")
supervisor = None
try:
    os.makedirs(work + "/plugins")
    subprocess.check_call(["cc", "-shared", "-fPIC", "-O2", "-I", root + "/SDK/Sources/CPluginABI/include",
                           "-o", work + "/libchello.so", root + "/examples/CHello/chello.c"])
    for i in range(n + 1):
        folder = f"{work}/plugins/p{i}"
        os.makedirs(folder)
        os.link(work + "/libchello.so", folder + "/libchello.so")
        manifest = {"identifier": f"com.example.p{i}", "version": "1.0.0", "library": "libchello.so"}
        if i > 0:
            manifest["activation"] = "onCall"
        with open(folder + "/plugin.json", "w") as f:
            json.dump(manifest, f)
    env = dict(os.environ, SUPERVISOR_HOME=work + "/home")
    log = open(work + "/log", "w")
    supervisor = subprocess.Popen([args.bin + "/supervisor", "start", "--plugins", work + "/plugins"],
                                  env=env, stdout=log, stderr=log)
    deadline = time.monotonic() + 60
    while "supervisor ready" not in open(work + "/log").read():
        if time.monotonic() > deadline or supervisor.poll() is not None:
            raise SystemExit("activation-burst: the supervisor did not get ready:\n" + open(work + "/log").read()[-2000:])
        time.sleep(0.05)

    def connect():
        s = socket.socket(socket.AF_UNIX)
        s.connect(work + "/home/supervisor.sock")
        return s

    def frame(message):
        body = json.dumps(message).encode()
        return struct.pack(">I", len(body)) + body

    def receive(s):
        def exactly(count):
            data = b""
            while len(data) < count:
                chunk = s.recv(count - len(data))
                if not chunk:
                    raise SystemExit("activation-burst: the supervisor closed a connection")
                data += chunk
            return data
        (length,) = struct.unpack(">I", exactly(4))
        return json.loads(exactly(length))

    burst, status_connection, call_connection = connect(), connect(), connect()
    done = threading.Event()
    waits = {"status": [], "call": []}

    def ask(s, kind):
        i = 0
        while not done.is_set():
            i += 1
            if kind == "status":
                request = {"type": "status", "id": i}
            else:
                request = {"type": "call", "id": i, "target": "com.example.p0", "method": "hello", "params": {}}
            started = time.monotonic()
            s.sendall(frame(request))
            receive(s)
            waits[kind].append(time.monotonic() - started)
            time.sleep(0.005)

    askers = [threading.Thread(target=ask, args=(status_connection, "status")),
              threading.Thread(target=ask, args=(call_connection, "call"))]
    for t in askers:
        t.start()
    time.sleep(0.3)
    calls = b"".join(frame({"type": "call", "id": i, "target": f"com.example.p{i}", "method": "hello", "params": {}})
                     for i in range(1, n + 1))
    started = time.monotonic()
    burst.sendall(calls)
    answers = [receive(burst) for _ in range(n)]
    took = time.monotonic() - started
    done.set()
    for t in askers:
        t.join()
    failed = [a for a in answers if "result" not in a]
    print(f"{n} first calls answered in {took * 1000:.0f} ms ({len(failed)} failed{': ' + str(failed[0]) if failed else ''}); "
          f"worst status {max(waits['status']) * 1000:.0f} ms of {len(waits['status'])}, "
          f"worst call to a running plugin {max(waits['call']) * 1000:.0f} ms of {len(waits['call'])}")
finally:
    if supervisor is not None:
        subprocess.run([args.bin + "/supervisor", "stop"], env=dict(os.environ, SUPERVISOR_HOME=work + "/home"), capture_output=True)
        try:
            supervisor.wait(timeout=30)
        except subprocess.TimeoutExpired:
            supervisor.kill()
    shutil.rmtree(work, ignore_errors=True)
