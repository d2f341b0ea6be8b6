#!/usr/bin/env bash
# The test suite under the thread sanitizer: `./scripts/test.sh --tsan` (docs/testing.md).
#
# Builds everything with --sanitize=thread in .build-tsan and runs the same `swift test`, so the test
# runner, the supervisor (daemon and CLI: one binary) and supervisor-installer are instrumented.
# plugin-worker, the fork server with the worker's library, and the plugin libraries a worker loads are
# the plain build's, copied beside them: a TSan worker cannot run in its sandbox (its RLIMIT_DATA
# refuses the sanitizer's memory, and an instrumented plugin library cannot be loaded by it), an
# instrumented fork server refuses to fork (docs/sandbox.md), and the races looked for are the
# supervisor's.
# Every instrumented process writes its reports to .build-tsan/tsan-reports/; the run fails, printing
# them, if any appears, even when every test passed. Arguments go to `swift test`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
"$root/scripts/install-deps.sh" --tests
scratch="$root/.build-tsan"
reports="$scratch/tsan-reports"
started=$SECONDS

# 1. The plain build: the worker and the plugin libraries that run inside it, the example bundles.
swift build
plain=$(swift build --show-bin-path)
"$root/scripts/assemble-plugins.sh" >/dev/null

# 2. Everything instrumented, tests included.
swift build --build-tests --sanitize=thread --scratch-path "$scratch"
bin=$(swift build --sanitize=thread --scratch-path "$scratch" --show-bin-path)
built=$SECONDS

# 3. The tests find every binary beside their own bundle: put the plain worker and plugin
#    libraries there, over their instrumented twins.
for f in "$plain/plugin-worker" "$plain/plugin-forkserver" "$plain"/lib*.so; do
  install -m 0755 "$f" "$bin/$(basename "$f")"
done

# 4. Where every instrumented process reports (files are written lazily: no file, no report).
rm -rf "$reports"
mkdir -p "$reports"
options="log_path=$reports/tsan halt_on_error=0 suppressions=$root/scripts/tsan-suppressions.txt"
export TSAN_OPTIONS="$options"
# The Swift runtime's backtracer starts a helper from the crashing thread's signal handler, which
# trips a CHECK in the TSan runtime; under TSan a crash is a plain signal, as in the workers.
export SWIFT_BACKTRACE=enable=no

# 5. The supervisor starts supervisor-installer with a scrubbed environment (PATH and
#    SWIFT_BACKTRACE only), so TSAN_OPTIONS would not reach it and its reports would be lost in a
#    pipe nobody reads: a wrapper of the same name puts the options back.
if head -c 4 "$bin/supervisor-installer" | grep -q ELF; then
  mv -f "$bin/supervisor-installer" "$bin/supervisor-installer.tsan"
fi
cat >"$bin/supervisor-installer" <<EOF
#!/bin/sh
# Written by scripts/test-tsan.sh: the instrumented installer, with the TSan options it would lose.
TSAN_OPTIONS='$options' exec '$bin/supervisor-installer.tsan' "\$@"
EOF
chmod 0755 "$bin/supervisor-installer"

# 6. The suite, then the verdict.
status=0
swift test --skip-build --no-parallel --sanitize=thread --scratch-path "$scratch" "$@" || status=$?
echo "tsan: build $((built - started)) s, tests $((SECONDS - built)) s" >&2
shopt -s nullglob
failed=()
for f in "$reports"/tsan*; do
  [ -s "$f" ] && failed+=("$f")
done
if [ ${#failed[@]} -gt 0 ]; then
  for f in "${failed[@]}"; do
    echo "==================== $(basename "$f") ====================" >&2
    swift demangle --simplified <"$f" >&2
  done
  echo "tsan: ${#failed[@]} process(es) wrote sanitizer reports (above, and in $reports):" >&2
  grep -h "^SUMMARY:" "${failed[@]}" | swift demangle --simplified | sort | uniq -c | sort -rn >&2 || true
  exit 1
fi
[ "$status" -eq 0 ] && echo "tsan: no sanitizer reports" >&2
exit "$status"
