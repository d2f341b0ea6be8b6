#!/usr/bin/env bash
# Runs the README's quick start exactly as written (the block between `<!-- quick start: begin -->`
# and `<!-- quick start: end -->`), from the repository's root, as a new user would on a fresh
# clone; then removes what it made. CI runs it beside the tests (once their build is done, so the
# `swift build` in it is a no-op), whose `swift test` holds the build folder's lock for its whole
# run: each `swift build` here passes SwiftPM's `--ignore-lock` (a shell function around `swift`;
# nothing else of the lines changes). Fails if any line fails or the call's answer is not the one
# the README promises.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
block=$(awk '/<!-- quick start: begin -->/{on=1; next} /<!-- quick start: end -->/{on=0} on' README.md | sed '/^```/d')
[ -n "$block" ] || { echo "check-readme: no quick start block in README.md" >&2; exit 1; }
[ ! -e my-plugins ] || { echo "check-readme: my-plugins/ exists; move it away first" >&2; exit 1; }
out=$(mktemp)
cleanup() {
  SUPERVISOR_HOME=/tmp/hello-home "$root/.build/debug/supervisor" stop >/dev/null 2>&1 || true
  rm -rf "$root/my-plugins" /tmp/hello-home /tmp/hello.log "$out"
}
trap cleanup EXIT
echo "==> the README's quick start:" >&2
echo "$block" | sed 's/^/    /' >&2
# `swift build` without waiting for the lock a running `swift test` holds (the lines are the README's).
unlocked='swift() { if [ "${1:-}" = build ]; then command swift "$@" --ignore-lock; else command swift "$@"; fi; }'
if ! bash -euo pipefail -c "$unlocked
$block" >"$out" 2>&1; then
  echo "check-readme: the quick start failed:" >&2; cat "$out" >&2
  [ -f /tmp/hello.log ] && { echo "--- supervisor log:" >&2; cat /tmp/hello.log >&2; }
  exit 1
fi
grep -q '"Hello from com.example.hello!"' "$out" || { echo "check-readme: no answer from the plugin:" >&2; cat "$out" >&2; exit 1; }
echo "==> the quick start works as written" >&2

# The README's host program: the same lines as examples/HostHello/main.swift, and it runs.
program=$(awk '/<!-- host program: begin -->/{on=1; next} /<!-- host program: end -->/{on=0} on' README.md | sed '/^```/d')
if ! diff <(echo "$program") examples/HostHello/main.swift >&2; then
  echo "check-readme: the README's host program and examples/HostHello/main.swift differ" >&2; exit 1
fi
swift build --product host-hello --ignore-lock >/dev/null
plugins=$(./scripts/assemble-plugins.sh)
rm -rf /tmp/host-hello
if ! timeout 120 "$root/.build/debug/host-hello" "$plugins" >"$out" 2>&1; then
  echo "check-readme: the host program failed:" >&2; cat "$out" >&2; exit 1
fi
rm -rf /tmp/host-hello
for expected in '"Hello, Ada!"' 'exited' 'started' '"Hello, again!"'; do
  grep -q "$expected" "$out" || { echo "check-readme: the host program did not print $expected:" >&2; cat "$out" >&2; exit 1; }
done
echo "==> the host program works as written" >&2
