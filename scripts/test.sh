#!/usr/bin/env bash
# The test command: installs what is missing, builds everything (plugins, worker, supervisor, the C
# example and fixtures with cc), then runs the unit and integration tests.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
"$root/scripts/install-deps.sh"
swift build --build-tests
"$root/scripts/assemble-plugins.sh" >/dev/null
swift test --skip-build --no-parallel "$@"
