#!/usr/bin/env bash
# The API docs: builds the DocC catalogs of PluginHost and SupervisorClient (this package) and of
# PluginSDK (the SDK/ package) with `swift package generate-documentation` (swift-docc-plugin),
# warnings as errors, and prints where each archive is. Exits non-zero on any warning: a symbol
# link in a catalog or a doc comment that names nothing, a malformed topic list.
# The targets are built in debug in the same folders as `swift build`, so after ./scripts/test.sh
# this package compiles nothing again; the first run in a folder also builds the plugin's snippet
# tool, and the SDK package on its own.
# Usage: scripts/docs.sh [--scratch-path DIR] [--sdk-scratch-path DIR]
#   (defaults: .build, and .build inside SDK/; a relative SDK path is taken from SDK/)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
scratch=.build
sdk_scratch=.build
while [ $# -gt 0 ]; do
  case "$1" in
    --scratch-path) scratch=$2; shift 2 ;;
    --sdk-scratch-path) sdk_scratch=$2; shift 2 ;;
    *) echo "usage: scripts/docs.sh [--scratch-path DIR] [--sdk-scratch-path DIR]" >&2; exit 2 ;;
  esac
done
logs=$(mktemp -d)
trap 'rm -rf "$logs"' EXIT

# One package's targets: its output in $logs/<name>.log, its exit status in $logs/<name>.rc.
document() {
  local name=$1 dir=$2 scratch_path=$3
  shift 3
  local targets=() rc=0
  for target in "$@"; do targets+=(--target "$target"); done
  (cd "$dir" && swift package --scratch-path "$scratch_path" generate-documentation "${targets[@]}" --warnings-as-errors) \
    >"$logs/$name.log" 2>&1 || rc=$?
  echo "$rc" >"$logs/$name.rc"
}

# Both packages at once: a first run is mostly builds (the snippet tool, the SDK package), which
# share two cores better than they follow each other.
document host "$root" "$scratch" PluginHost SupervisorClient &
document sdk "$root/SDK" "$sdk_scratch" PluginSDK &
wait
failed=0
for name in host sdk; do
  echo "docs: $([ "$name" = host ] && echo "PluginHost, SupervisorClient" || echo "PluginSDK (SDK/)")"
  grep -v '^\[[0-9]*/[0-9]*\]' "$logs/$name.log" || true
  [ "$(cat "$logs/$name.rc")" = 0 ] || failed=1
done

# DocC's diagnostics start their lines (a compiler's start with a file path).
warnings=$(cat "$logs/host.log" "$logs/sdk.log" | grep -c '^warning:' || true)
errors=$(cat "$logs/host.log" "$logs/sdk.log" | grep -c '^error:' || true)
echo "docs: $warnings warnings, $errors errors"
if [ "$failed" -ne 0 ] || [ "$warnings" -ne 0 ] || [ "$errors" -ne 0 ]; then
  echo "docs: FAILED (warnings are errors here: fix the doc comment or the catalog named above)" >&2
  exit 1
fi
# Each archive is a static site: serve its folder and open /documentation/<module, lowercased>.
cat "$logs/host.log" "$logs/sdk.log" | grep -oE '/[^ ]*/(PluginHost|SupervisorClient|PluginSDK)\.doccarchive$' | sort -u |
  sed 's/^/docs: archive /'
