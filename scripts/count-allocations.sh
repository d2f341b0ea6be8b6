#!/usr/bin/env bash
# Heap allocations per call on the call path (docs/benchmarks.md "Allocations per call"):
# starts a supervisor from a release build with three plugins (bench.callee, TestKit; bench.caller,
# TestKit; bench.crelay, the C relay of Benchmarks/CRelay), then counts, with uprobes on libc's
# `malloc`, the Swift runtime's `swift_allocObject` and `swift_task_create`, what one process does
# per call: `perf stat -p` over 4,000 calls from a raw control-socket client, minus the same client
# making none (its 200 warm-up calls are in both). Needs perf (linux-perf) and root.
# Usage: scripts/count-allocations.sh [build folder, default .build/release]. About a minute.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
folder=${1:-$root/.build/release}
[ -d "$folder" ] || { echo "count-allocations: no build folder $folder (swift build -c release, or name one)" >&2; exit 2; }
bin=$(cd "$folder" && pwd)
[ "$(id -u)" -eq 0 ] || { echo "count-allocations: uprobes need root (perf probe)" >&2; exit 2; }
for f in supervisor libTestKit.so libCRelay.so; do
  [ -e "$bin/$f" ] || { echo "no $bin/$f: build first (swift build -c release)" >&2; exit 1; }
done
command -v perf >/dev/null || { echo "perf is missing (apt-get install linux-perf)" >&2; exit 1; }

libc=$(ldconfig -p | awk '/libc\.so\.6 .*x86-64|libc\.so\.6 .*AArch64/ {print $NF; exit}')
swiftlib=$(dirname "$(ldd "$bin/supervisor" | awk '/libswiftCore\.so/ {print $3; exit}')")
perf probe -q -d 'probe_libc:malloc' -d 'probe_libswiftCore:swift_allocObject' -d 'probe_libswift_Concurrency:swift_task_create' 2>/dev/null || true
perf probe -q -x "$libc" malloc
perf probe -q -x "$swiftlib/libswiftCore.so" swift_allocObject
perf probe -q -x "$swiftlib/libswift_Concurrency.so" swift_task_create
events=probe_libc:malloc,probe_libswiftCore:swift_allocObject,probe_libswift_Concurrency:swift_task_create

work=$(mktemp -d /tmp/count-allocations.XXXXXX)
supervisor=""
cleanup() {
  [ -n "$supervisor" ] && kill "$supervisor" 2>/dev/null && wait "$supervisor" 2>/dev/null
  perf probe -q -d 'probe_libc:malloc' -d 'probe_libswiftCore:swift_allocObject' -d 'probe_libswift_Concurrency:swift_task_create' 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

for id in bench.callee bench.caller bench.crelay; do
  lib=libTestKit.so; [ "$id" = bench.crelay ] && lib=libCRelay.so
  deps=""; [ "$id" != bench.callee ] && deps=',"dependencies":["bench.callee"]'
  mkdir -p "$work/plugins/$id"
  cp "$bin/$lib" "$work/plugins/$id/"
  echo "{\"identifier\":\"$id\",\"version\":\"1.0.0\",\"library\":\"$lib\"$deps}" > "$work/plugins/$id/plugin.json"
done
"$bin/supervisor" start --home "$work/home" --plugins "$work/plugins" --log-level warning > "$work/out" 2> "$work/err" &
supervisor=$!
for _ in $(seq 100); do grep -q ready "$work/out" 2>/dev/null && break; sleep 0.1; done
grep -q ready "$work/out" || { echo "the supervisor did not start:" >&2; cat "$work/err" >&2; exit 1; }

cat > "$work/client.py" <<'EOF'
import json, socket, struct, sys
sock, target, method, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
params = json.loads(sys.argv[5]) if len(sys.argv) > 5 else None
s = socket.socket(socket.AF_UNIX); s.connect(sock)
def exact(n):
    b = b""
    while len(b) < n:
        more = s.recv(n - len(b))
        if not more: raise SystemExit("the supervisor closed the connection")
        b += more
    return b
def call(i):
    m = {"type": "call", "id": i, "target": target, "method": method}
    if params is not None: m["params"] = params
    body = json.dumps(m).encode()
    s.sendall(struct.pack(">I", len(body)) + body)
    reply = exact(struct.unpack(">I", exact(4))[0])
    if b'"result"' not in reply: raise SystemExit("not answered: " + reply.decode(errors="replace"))
for i in range(200 + n): call(i + 1)
EOF

pid_of() { "$bin/supervisor" status --home "$work/home" --json | python3 -c "
import json, sys
d = json.load(sys.stdin); d = d['plugins'] if isinstance(d, dict) else d
print(next(p['pid'] for p in d if p['identifier'] == '$1'))"; }
count() {  # pid target method n [params]
  perf stat -x, -e "$events" -p "$1" -- python3 "$work/client.py" "$work/home/supervisor.sock" "${@:2}" 2>&1 >/dev/null | cut -d, -f1 | tr '\n' ' '
}
row() {  # label pid target method [params]
  local none many
  none=$(count "$2" "$3" "$4" 0 ${5:+"$5"})
  many=$(count "$2" "$3" "$4" 4000 ${5:+"$5"})
  python3 -c '
import sys
a = list(map(int, sys.argv[2].split())); b = list(map(int, sys.argv[3].split()))
print("%-44s %8.2f %12.2f %6.2f" % (sys.argv[1], *[(y - x) / 4000 for x, y in zip(a, b)]))' "$1" "$none" "$many"
}
supervisor_pid=$supervisor
printf '%-44s %8s %12s %6s\n' "per call" malloc allocObject task
row "supervisor, a host call (ping)" "$supervisor_pid" bench.callee ping
row "callee's worker, a synchronous method (ping)" "$(pid_of bench.callee)" bench.callee ping
row "caller's worker, Swift typed (pingVia)" "$(pid_of bench.caller)" bench.caller pingVia '"bench.callee"'
row "caller's worker, inline (pingViaInline)" "$(pid_of bench.caller)" bench.caller pingViaInline '"bench.callee"'
row "C relay's worker" "$(pid_of bench.crelay)" bench.crelay ping
