#!/usr/bin/env bash
# The host example (examples/host-http, docs/host.md) as a user builds it: a copy of it placed
# outside this repository, depending on it by absolute path, built with a plain `swift build` (a
# package of its own: an HTTP server on SwiftNIO beside PluginHost). Its build has no plugin-worker and no
# plugin-forkserver, and it runs with no SUPERVISOR_BINARIES and no `supervisor` on PATH: its own
# executable is its workers' and fork server's binary. It runs over the example plugins; the
# script asks it over HTTP for a plugin's answer and for a plugin that does not exist, checks its
# workers are forked from it and sandboxed (seccomp filter on, every layer in `status`), then sends
# SIGTERM and checks that it exits 0 within the grace period with every worker gone; a second run
# is SIGKILLed and takes its workers with it.
#
#   scripts/check-host-example.sh [--scratch-path DIR]
#
# --scratch-path DIR (CI, with this repository's .build): the copy is built in DIR, so that what it
# shares with this package (SwiftNIO and the rest) is not compiled twice; the program is then run
# from a folder of its own, where no plugin-worker is beside it, as in a user's build. Without it
# the copy has a .build of its own, exactly as a user's package. CI runs this beside the suite,
# whose `swift test` holds the build folder's lock for its whole run: the builds here pass
# SwiftPM's `--ignore-lock` (they write nothing the running tests read).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scratch=""
case "${1:-}" in
  --scratch-path) scratch=$(mkdir -p "$2" && cd "$2" && pwd) ;;
  "") ;;
  *) echo "usage: scripts/check-host-example.sh [--scratch-path DIR]" >&2; exit 64 ;;
esac
swift build --ignore-lock >/dev/null
plugins=$(./scripts/assemble-plugins.sh)
# Outside the repository; one folder per clone, kept between runs so that a second run builds
# only what changed.
outside=${TMPDIR:-/tmp}/host-http-outside-$(printf '%s' "$root" | md5sum | cut -c1-12)
mkdir -p "$outside"
rm -rf "$outside/Sources"
cp -R examples/host-http/Sources "$outside/Sources"
sed "s|^let root = .*|let root = URL(fileURLWithPath: \"$root\")|" examples/host-http/Package.swift >"$outside/Package.swift"
grep -q "^let root = URL(fileURLWithPath: \"$root\")" "$outside/Package.swift" \
  || { echo "check-host-example: could not point the copy's Package.swift at $root" >&2; exit 1; }
echo "==> building a copy of examples/host-http in $outside (first build takes minutes)" >&2
log=$(mktemp)
if [ -n "$scratch" ]; then
  if ! (cd "$outside" && swift build --scratch-path "$scratch" --ignore-lock) >"$log" 2>&1; then cat "$log" >&2; exit 1; fi
  # Alone in a folder, as in a build of its own: nothing to run beside it.
  mkdir -p "$outside/alone"
  cp "$(cd "$outside" && swift build --scratch-path "$scratch" --ignore-lock --show-bin-path)/HostHTTP" "$outside/alone/HostHTTP"
  program=$outside/alone/HostHTTP
else
  if ! (cd "$outside" && swift build) >"$log" 2>&1; then cat "$log" >&2; exit 1; fi
  program=$outside/.build/debug/HostHTTP
  for binary in plugin-worker plugin-forkserver libPluginWorkerCore.so supervisor; do
    if [ -e "$outside/.build/debug/$binary" ]; then echo "check-host-example: the copy's build has $binary" >&2; exit 1; fi
  done
fi
# As a user runs it: no variable, no supervisor on PATH (an empty folder: it runs nothing by name).
run_host() {
  mkdir -p "$work/empty"
  env -u SUPERVISOR_BINARIES PATH=$work/empty PORT=$port PLUGIN_HOME=$work/home \
    "$program" "$plugins" >"$work/out" 2>&1 &
  pid=$!
}
work=$(mktemp -d)
# `status` from a copy: a build of this package meanwhile (CI's next step) may relink the original.
cp "$root/.build/debug/supervisor" "$work/supervisor"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
run_host
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
"$work/supervisor" status --json --home "$work/home" >"$work/status"
workers=$(python3 -c 'import json,sys; print(" ".join(str(p["pid"]) for p in json.load(open(sys.argv[1])) if p.get("pid")))' "$work/status")
[ -n "$workers" ] || { echo "check-host-example: no workers in status" >&2; exit 1; }
# Forked by the program's own fork server, with the same sandbox as a plugin-worker's.
if ! python3 - "$work/status" <<'PY'
import json, sys
layers = {"userNamespace", "pidNamespace", "networkNamespace", "noNewPrivs", "landlock", "seccomp"}
for p in json.load(open(sys.argv[1])):
    if not p.get("pid"):
        continue
    problems = []
    if p.get("workerStart") != "fork-server" or p.get("workerStartProblem"):
        problems.append("not forked by the fork server: %s %s" % (p.get("workerStart"), p.get("workerStartProblem") or ""))
    if not layers <= set(p.get("sandbox", [])):
        problems.append("sandbox %s lacks %s" % (p.get("sandbox"), sorted(layers - set(p.get("sandbox", [])))))
    if problems:
        print("check-host-example: %s: %s" % (p["identifier"], "; ".join(problems)), file=sys.stderr)
        sys.exit(1)
PY
then cat "$work/status" >&2; exit 1; fi
for w in $workers; do
  seccomp=$(awk '/^Seccomp:/ {print $2}' "/proc/$w/status")
  [ "$seccomp" = 2 ] || { echo "check-host-example: worker $w has Seccomp: $seccomp (2 is a filter)" >&2; exit 1; }
done
echo "==> its workers (pids $workers) are forked from its own executable, sandboxed, Seccomp: 2" >&2
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
run_host
for _ in $(seq 1 300); do case "$(get "$base/health")" in 200*) break;; esac; sleep 0.1; done
workers=$("$work/supervisor" status --json --home "$work/home" | python3 -c 'import json,sys; print(" ".join(str(p["pid"]) for p in json.load(sys.stdin) if p.get("pid")))')
[ -n "$workers" ] || { echo "check-host-example: no workers in status (second run)" >&2; cat "$work/out" >&2; exit 1; }
kill -KILL $pid
wait $pid 2>/dev/null || true
for w in $workers; do
  for _ in $(seq 1 50); do kill -0 "$w" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$w" 2>/dev/null; then echo "check-host-example: worker $w outlived a SIGKILLed host" >&2; exit 1; fi
done
echo "==> a SIGKILLed host takes its workers with it" >&2
