#!/usr/bin/env bash
# The test command: installs what is missing, checks that no Swift file is over 400 lines
# (scripts/check-sizes.sh), builds everything (plugins, worker, supervisor, the C example and
# fixtures with cc), then runs the unit and integration tests, then the Python client's pytest
# suite (scripts/test-python.sh).
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
swift test --skip-build --no-parallel "$@"
# The Python client's suite (clients/python), with the whole run only (not with a --filter).
if [ $# -eq 0 ]; then "$root/scripts/test-python.sh"; fi
