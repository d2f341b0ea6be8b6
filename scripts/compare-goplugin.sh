#!/usr/bin/env bash
# The published comparison with HashiCorp go-plugin (docs/benchmarks.md#results):
# builds a go-plugin peer from Debian's golang-github-hashicorp-go-plugin-dev (net/rpc over a Unix
# socket, a trivial plugin and a host; a gRPC plugin with a server stream: Benchmarks/goplugin), runs it and supervisor-bench in
# alternating rounds on this machine, and writes the medians, the ratios and a chart:
#   docs/benchmarks/comparison.json, docs/benchmarks/comparison.svg
# Usage: scripts/compare-goplugin.sh [--runs N] (default 3). Takes a few minutes; not part of CI.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
runs=3
if [ "${1:-}" = "--runs" ]; then runs=${2:?--runs needs a number}; fi

# Debian's go and go-plugin with what it imports (GOPATH mode: /usr/share/gocode).
need=()
command -v go >/dev/null || need+=(golang-go)
[ -d /usr/share/gocode/src/github.com/hashicorp/go-plugin ] || need+=(golang-github-hashicorp-go-plugin-dev)
[ -d /usr/share/gocode/src/google.golang.org/grpc ] || need+=(golang-google-grpc-dev)
[ -d /usr/share/gocode/src/github.com/golang/protobuf ] || need+=(golang-goprotobuf-dev)
[ -d /usr/share/gocode/src/golang.org/x/net ] || need+=(golang-golang-x-net-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "installing ${need[*]}" >&2
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${need[@]}" >/dev/null
fi
./scripts/install-deps.sh

out="$root/.build/compare"
mkdir -p "$out"
echo "==> building the go-plugin peer and the release build" >&2
(cd Benchmarks/goplugin && export GOPATH=/usr/share/gocode GO111MODULE=off GOFLAGS= GOCACHE="$out/gocache" &&
  go build -o "$out/goplugin-host" ./host && go build -o "$out/goplugin-plugin" ./plugin && go build -o "$out/goplugin-stream" ./streamplugin)
swift build -c release >"$out/build.log" 2>&1 || { cat "$out/build.log" >&2; exit 1; }
go_version=$(dpkg-query -W -f '${Version}' golang-github-hashicorp-go-plugin-dev)

for i in $(seq 1 "$runs"); do
  echo "==> round $i of $runs: supervisor-bench, then go-plugin" >&2
  .build/release/supervisor-bench --json >"$out/ours-$i.json"
  "$out/goplugin-host" -plugin "$out/goplugin-plugin" -stream-plugin "$out/goplugin-stream" >"$out/go-$i.json" 2>"$out/go-$i.log"
done
mkdir -p docs/benchmarks
python3 scripts/comparison-chart.py --runs "$runs" --dir "$out" --go-plugin-version "$go_version" \
  --json docs/benchmarks/comparison.json --svg docs/benchmarks/comparison.svg
