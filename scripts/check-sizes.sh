#!/usr/bin/env bash
# Fails (exit 1) when a Swift file under Sources/ or SDK/Sources/ is over 400 lines (STYLE.md: one
# concept per file; a file that long holds two): prints each with its count, then how many there
# are. scripts/test.sh runs it before the build. Usage: scripts/check-sizes.sh [limit]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
limit=${1:-400}
total=0
over=0
while IFS= read -r -d '' file; do
  total=$((total + 1))
  lines=$(wc -l <"$file")
  if [ "$lines" -gt "$limit" ]; then
    over=$((over + 1))
    echo "sizes: $file: $lines lines (over $limit)"
  fi
done < <(find Sources SDK/Sources -name '*.swift' -type f -print0 | sort -z)
echo "sizes: $over of $total Swift files over $limit lines"
if [ "$over" -gt 0 ]; then
  echo "sizes: split each by concept (one concept per file, STYLE.md \"Layout\")" >&2
  exit 1
fi
