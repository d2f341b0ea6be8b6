#!/usr/bin/env bash
# CI's short fuzz run: every fail case replayed, then each target for 15 seconds (scripts/fuzz.sh).
# The long runs (10 million executions per target) are `scripts/fuzz.sh --runs 10000000`.
set -euo pipefail
exec "$(cd "$(dirname "$0")" && pwd)/fuzz.sh" --seconds "${FUZZ_SECONDS:-15}"
