#!/usr/bin/env bash
# The test command: installs what is missing, checks that no Swift file is over 400 lines
# (scripts/check-sizes.sh), builds everything (plugins, worker, supervisor, the C example and
# fixtures with cc), then runs the unit and integration tests (as two processes, one a core),
# then the Python client's pytest suite (scripts/test-python.sh).
# `--tsan` runs the same suite built with the thread sanitizer instead (scripts/test-tsan.sh,
# docs/testing.md); any other arguments go to `swift test`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if [ "${1:-}" = "--tsan" ]; then shift; exec "$root/scripts/test-tsan.sh" "$@"; fi
"$root/scripts/install-deps.sh" --tests
# No Swift file over 400 lines (one concept per file): fails before the build, naming each.
"$root/scripts/check-sizes.sh"
swift build --build-tests
"$root/scripts/assemble-plugins.sh" >/dev/null
# For CI (.ci/run): the build the tests run on is done; what runs beside them may start.
if [ -n "${SP_TESTS_BUILT:-}" ]; then touch "$SP_TESTS_BUILT"; fi
if [ $# -gt 0 ]; then exec swift test --skip-build --no-parallel "$@"; fi
# The whole run uses both cores: the suite's tests run one at a time within a process (they share
# the SDK's process-wide runtime, and several time a supervisor), so it runs as two processes. The
# longest suites (their own builds with cargo, go and swift, archives, big payloads, the sandbox's
# attacks, clients that read nothing until hundreds of MiB wait for them) run in one, in the
# background, its output shown when it ends; everything else, then the Python client's suite
# (clients/python) and a 20-second chaos run (scripts/chaos.py), in the other. The two take about
# as long (in CI on a slow day here, with its lane's builds beside them: 801 s and 826 s). A suite
# added later goes to the second.
# `swift test` holds the build folder's lock for its whole run: each passes --ignore-lock (there
# is nothing to build).
long='IntegrationTests\.(InstallTests|ScaffoldTests|BytesTests|SandboxTests|LanguageTests|RealLibraryTests|UnreadFramesTests|ControlBackPressureTests)/'
long_log=$(mktemp)
long_pid=""
trap '[ -n "$long_pid" ] && kill "$long_pid" 2>/dev/null; rm -f "$long_log"' EXIT
swift test --skip-build --ignore-lock --no-parallel --filter "$long" >"$long_log" 2>&1 & long_pid=$!
rc=0
swift test --skip-build --ignore-lock --no-parallel --skip "$long" || rc=$?
if [ $rc -eq 0 ]; then "$root/scripts/test-python.sh" || rc=$?; fi
# A short run of calls under random faults (scripts/chaos.py; minutes of it: scripts/chaos.py --minutes 10).
if [ $rc -eq 0 ]; then python3 "$root/scripts/chaos.py" --minutes 0.33 --bin "$(swift build --show-bin-path)" || rc=$?; fi
long_rc=0
wait "$long_pid" || long_rc=$?
long_pid=""
echo "== the longest suites (run beside the others): =="
cat "$long_log"
if [ $rc -ne 0 ]; then exit $rc; fi
exit $long_rc
