#!/usr/bin/env bash
# The test command: installs what is missing, builds everything (plugins, worker, supervisor, the C
# example and fixtures with cc), then runs the unit and integration tests, then the Python client's
# pytest suite (scripts/test-python.sh).
# `--tsan` runs the same suite built with the thread sanitizer instead (scripts/test-tsan.sh,
# docs/testing.md); any other arguments go to `swift test`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if [ "${1:-}" = "--tsan" ]; then shift; exec "$root/scripts/test-tsan.sh" "$@"; fi
"$root/scripts/install-deps.sh" --tests
swift build --build-tests
"$root/scripts/assemble-plugins.sh" >/dev/null
swift test --skip-build --no-parallel "$@"
# The Python client's suite (clients/python), with the whole run only (not with a --filter).
if [ $# -eq 0 ]; then "$root/scripts/test-python.sh"; fi
