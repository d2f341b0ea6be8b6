#!/usr/bin/env bash
# Builds the libFuzzer targets in FuzzTesting/ (a package of its own) and runs them.
#
#   scripts/fuzz.sh [TARGET...] [--runs N | --seconds S]
#
# TARGET: FuzzFrameDecoder, FuzzEnvelope, FuzzManifest, FuzzCatalog (default: all four).
# --runs N: N executions per target (e.g. --runs 10000000); --seconds S: S seconds per target
# (default 60). Each target first replays FuzzTesting/FailCases/<target>/ (every input that once
# crashed it), then fuzzes from its seed corpus FuzzTesting/Corpus/<target>/ with its dictionary
# FuzzTesting/<target>.dict. New inputs go to a scratch corpus under FuzzTesting/.build (the
# committed corpus stays small). A crash stops the run, exits non-zero and says where the input is:
# minimize it, add it to FailCases/<target>/ and fix the code.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
pkg="$root/FuzzTesting"
targets=()
limit=(-max_total_time=60)
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) limit=(-runs="$2"); shift 2 ;;
    --seconds) limit=(-max_total_time="$2"); shift 2 ;;
    Fuzz*) targets+=("$1"); shift ;;
    *) echo "usage: scripts/fuzz.sh [TARGET...] [--runs N | --seconds S]" >&2; exit 2 ;;
  esac
done
[ ${#targets[@]} -gt 0 ] || targets=(FuzzFrameDecoder FuzzEnvelope FuzzManifest FuzzCatalog)

"$root/scripts/install-deps.sh"
flags=(-c release --package-path "$pkg" -Xswiftc -sanitize=fuzzer,address -Xswiftc -parse-as-library)
started=$SECONDS
swift build "${flags[@]}" >&2
bin=$(swift build "${flags[@]}" --show-bin-path)
echo "fuzz: built in $((SECONDS - started)) s" >&2

for t in "${targets[@]}"; do
  [ -x "$bin/$t" ] || { echo "fuzz: no target $t" >&2; exit 2; }
  work="$pkg/.build/fuzz/$t"
  artifacts="$pkg/.build/fuzz-artifacts/$t/"
  mkdir -p "$work" "$artifacts"
  shopt -s nullglob
  fails=("$pkg/FailCases/$t"/*)
  shopt -u nullglob
  cases=()
  for f in "${fails[@]}"; do [ "$(basename "$f")" = README ] || cases+=("$f"); done
  if [ ${#cases[@]} -gt 0 ]; then
    echo "fuzz: $t: replaying ${#cases[@]} fail case(s)" >&2
    "$bin/$t" -artifact_prefix="$artifacts" "${cases[@]}" >&2
  fi
  echo "fuzz: $t: ${limit[*]}" >&2
  t0=$SECONDS
  if ! "$bin/$t" -dict="$pkg/$t.dict" "${limit[@]}" -print_final_stats=1 -artifact_prefix="$artifacts" \
       "$work" "$pkg/Corpus/$t" 2>"$work.log"; then
    tail -40 "$work.log" >&2
    echo "fuzz: $t CRASHED; the input is in $artifacts (add it to FuzzTesting/FailCases/$t/)" >&2
    exit 1
  fi
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work.log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work.log" | tail -1)
  echo "fuzz: $t: ${runs:-?} runs in $((SECONDS - t0)) s (${rate:-?}/s), no crash" >&2
done
