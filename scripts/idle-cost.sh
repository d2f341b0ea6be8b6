#!/usr/bin/env bash
# What N idle plugins cost the supervisor: N copies of the C example plugin (sandbox on, fork
# server), started with the release build; once ready and with no traffic, the supervisor's CPU
# (user + system, from /proc/<pid>/stat) over a window, its wake-ups (voluntary and involuntary
# context switches), RSS and descriptors; then how long `status --json` and `stop` take.
#
#   scripts/idle-cost.sh [N ...]        (default: 50 200; needs `swift build -c release` first)
#   SECONDS_IDLE=20 BIN=.build/release scripts/idle-cost.sh 1000
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${BIN:-$root/.build/release}
idle=${SECONDS_IDLE:-20}
[ -x "$bin/supervisor" ] || { echo "idle-cost: no $bin/supervisor; run swift build -c release first" >&2; exit 1; }
[ $# -gt 0 ] || set -- 50 200
hz=$(getconf CLK_TCK)
ulimit -n 65536 2>/dev/null || true
printf '%-8s %-10s %-12s %-14s %-10s %-6s %-10s %-8s\n' plugins ready_ms idle_cpu_% wakeups_per_s rss_MiB fds status_ms stop_ms
for n in "$@"; do
  work=$(mktemp -d)
  mkdir -p "$work/plugins"
  cc -shared -fPIC -O2 -I "$root/SDK/Sources/CPluginABI/include" -o "$work/libchello.so" "$root/examples/CHello/chello.c"
  for i in $(seq 1 "$n"); do
    d="$work/plugins/p$i"
    mkdir -p "$d"
    cp "$work/libchello.so" "$d/"
    printf '{"identifier": "com.example.idle%d", "version": "1.0.0", "library": "libchello.so"}\n' "$i" >"$d/plugin.json"
  done
  export SUPERVISOR_HOME="$work/home"
  started=$(date +%s%N)
  "$bin/supervisor" start --plugins "$work/plugins" >"$work/log" 2>&1 &
  pid=$!
  for _ in $(seq 1 1200); do grep -q "supervisor ready" "$work/log" && break; sleep 0.05; done
  grep -q "supervisor ready" "$work/log" || { echo "idle-cost: not ready with $n plugins:" >&2; tail -20 "$work/log" >&2; kill -9 $pid; exit 1; }
  ready_ms=$(( ($(date +%s%N) - started) / 1000000 ))
  sleep 2
  read -r u1 s1 < <(awk '{print $14, $15}' /proc/$pid/stat)
  v1=$(cat /proc/$pid/task/*/status 2>/dev/null | awk '/^(non)?voluntary_ctxt_switches/ {s += $2} END {print s}')
  sleep "$idle"
  read -r u2 s2 < <(awk '{print $14, $15}' /proc/$pid/stat)
  v2=$(cat /proc/$pid/task/*/status 2>/dev/null | awk '/^(non)?voluntary_ctxt_switches/ {s += $2} END {print s}')
  cpu=$(awk -v d=$(( u2 + s2 - u1 - s1 )) -v hz="$hz" -v t="$idle" 'BEGIN {printf "%.2f", 100 * d / hz / t}')
  wakeups=$(( (v2 - v1) / idle ))
  rss=$(awk '/^VmRSS/ {printf "%.1f", $2 / 1024}' /proc/$pid/status)
  fds=$(ls /proc/$pid/fd | wc -l)
  t0=$(date +%s%N); "$bin/supervisor" status --json >/dev/null; status_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  t0=$(date +%s%N); "$bin/supervisor" stop >/dev/null 2>&1 || true
  wait $pid || true
  stop_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  printf '%-8s %-10s %-12s %-14s %-10s %-6s %-10s %-8s\n' "$n" "$ready_ms" "$cpu" "$wakeups" "$rss" "$fds" "$status_ms" "$stop_ms"
  rm -rf "$work"
done
