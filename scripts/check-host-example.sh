#!/usr/bin/env bash
# The host example (examples/host-http, docs/host.md) from a fresh clone: builds it (a package of
# its own: Hummingbird 2 beside PluginHost), runs it over the example plugins, asks it over HTTP
# for a plugin's answer and for a plugin that does not exist, then sends SIGTERM and checks that it
# exits 0 within the grace period with every worker gone. CI runs it after the tests.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
swift build >/dev/null
plugins=$(./scripts/assemble-plugins.sh)
echo "==> building examples/host-http (first build takes minutes)" >&2
log=$(mktemp)
if ! swift build --package-path examples/host-http >"$log" 2>&1; then cat "$log" >&2; exit 1; fi
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
PORT=$port PLUGIN_HOME=$work/home SUPERVISOR_BINARIES=$root/.build/debug \
  examples/host-http/.build/debug/HostHTTP "$plugins" >"$work/out" 2>&1 &
pid=$!
cleanup() { kill -9 $pid 2>/dev/null || true; rm -rf "$work" "$log"; }
trap cleanup EXIT
get() {  # prints "<status> <body>"
  python3 - "$1" <<'PY'
import sys, urllib.request, urllib.error
try:
    with urllib.request.urlopen(sys.argv[1], timeout=10) as r: print(r.status, r.read().decode())
except urllib.error.HTTPError as e: print(e.code, e.read().decode())
except Exception as e: print(0, e)
PY
}
base="http://127.0.0.1:$port"
for _ in $(seq 1 300); do
  case "$(get "$base/health")" in 200*) break;; esac
  kill -0 $pid 2>/dev/null || { echo "check-host-example: it exited:" >&2; cat "$work/out" >&2; exit 1; }
  sleep 0.1
done
answer=$(get "$base/plugins/com.example.greeter/hello?name=Ada")
echo "GET /plugins/com.example.greeter/hello?name=Ada -> $answer" >&2
case "$answer" in '200 {"greeting":"Hello, Ada!"}') ;; *) echo "check-host-example: unexpected answer" >&2; cat "$work/out" >&2; exit 1;; esac
missing=$(get "$base/plugins/com.example.nope/x")
echo "GET /plugins/com.example.nope/x -> $missing" >&2
case "$missing" in 404*notFound*) ;; *) echo "check-host-example: unexpected answer for a missing plugin" >&2; exit 1;; esac
workers=$("$root/.build/debug/supervisor" status --json --home "$work/home" | python3 -c 'import json,sys; print(" ".join(str(p["pid"]) for p in json.load(sys.stdin) if p.get("pid")))')
[ -n "$workers" ] || { echo "check-host-example: no workers in status" >&2; exit 1; }
kill -TERM $pid
rc=0
for _ in $(seq 1 200); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
if kill -0 $pid 2>/dev/null; then echo "check-host-example: still running 20 s after SIGTERM" >&2; cat "$work/out" >&2; exit 1; fi
wait $pid || rc=$?
[ $rc -eq 0 ] || { echo "check-host-example: exit $rc after SIGTERM:" >&2; cat "$work/out" >&2; exit 1; }
for w in $workers; do
  if kill -0 "$w" 2>/dev/null; then echo "check-host-example: worker $w outlived the host" >&2; exit 1; fi
done
grep -q "all plugins stopped" "$work/out" || { echo "check-host-example: the plugins were not stopped:" >&2; cat "$work/out" >&2; exit 1; }
echo "==> the host example answers over HTTP and stops cleanly on SIGTERM" >&2

# The program's crash takes its workers with it (each dies with the thread that made it).
PORT=$port PLUGIN_HOME=$work/home SUPERVISOR_BINARIES=$root/.build/debug \
  examples/host-http/.build/debug/HostHTTP "$plugins" >"$work/out" 2>&1 &
pid=$!
for _ in $(seq 1 300); do case "$(get "$base/health")" in 200*) break;; esac; sleep 0.1; done
workers=$("$root/.build/debug/supervisor" status --json --home "$work/home" | python3 -c 'import json,sys; print(" ".join(str(p["pid"]) for p in json.load(sys.stdin) if p.get("pid")))')
[ -n "$workers" ] || { echo "check-host-example: no workers in status (second run)" >&2; cat "$work/out" >&2; exit 1; }
kill -KILL $pid
wait $pid 2>/dev/null || true
for w in $workers; do
  for _ in $(seq 1 50); do kill -0 "$w" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$w" 2>/dev/null; then echo "check-host-example: worker $w outlived a SIGKILLed host" >&2; exit 1; fi
done
echo "==> a SIGKILLed host takes its workers with it" >&2
