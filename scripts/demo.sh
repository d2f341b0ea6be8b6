#!/usr/bin/env bash
# The demo: builds everything, starts the supervisor with the example plugins, shows them running,
# makes a few calls, then shuts down cleanly. `--keep` leaves the supervisor running in the
# foreground instead (Ctrl-C stops it).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
"$root/scripts/install-deps.sh"
echo "==> building (first build takes a few minutes)" >&2
mkdir -p .build
if ! swift build >.build/demo-build.log 2>&1; then cat .build/demo-build.log >&2; exit 1; fi
plugins=$("$root/scripts/assemble-plugins.sh")
export SUPERVISOR_HOME=${SUPERVISOR_HOME:-$root/.build/demo-home}
mkdir -p "$SUPERVISOR_HOME"
bin="$root/.build/debug"
sv="$bin/supervisor"

if [ "${1:-}" = "--keep" ]; then
  echo "==> supervisor start --plugins $plugins   (home $SUPERVISOR_HOME; Ctrl-C to stop)" >&2
  exec "$sv" start --plugins "$plugins"
fi

out=$(mktemp)
"$sv" start --plugins "$plugins" >"$out" 2>"$SUPERVISOR_HOME/supervisor.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true; rm -f "$out"' EXIT
for _ in $(seq 1 200); do grep -q ready "$out" && break; kill -0 $pid 2>/dev/null || break; sleep 0.05; done
if ! grep -q ready "$out"; then echo "the supervisor did not become ready; its log:" >&2; cat "$SUPERVISOR_HOME/supervisor.log" >&2; exit 1; fi
cat "$out"
run() { echo; echo "\$ supervisor $*"; "$sv" "$@"; }
run status
run call com.example.greeter username
run call com.example.greeter greet '{"name":"Ada"}'
run call com.example.welcome welcome
run open 'plugin://com.example.greeter/hello?name=Grace'
run call com.example.chello add '[40, 2]'
run call com.example.asyncworks work
run call --stream com.example.asyncworks rows '{"count":4}'
run call --stream com.example.chello count '{"n":3}'
run call --output "$SUPERVISOR_HOME/chello.bin" com.example.chello bytes '{"n":1000000}'
run send memoryWarning
run stop
if wait $pid; then rc=0; else rc=$?; fi
echo
echo "supervisor exited with status $rc; its log is in $SUPERVISOR_HOME/supervisor.log"
echo "Run it yourself: $sv start --plugins $plugins   (or ./scripts/demo.sh --keep)"
