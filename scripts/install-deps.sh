#!/usr/bin/env bash
# Installs what a new Debian/Ubuntu machine lacks to build and test this package: the C libraries
# the sandbox and installer link against, pkg-config and a C compiler. Swift itself must be on PATH.
# Usage: scripts/install-deps.sh [--tests] [--package]
set -euo pipefail
need=()
# libcrypto: the installer's Ed25519 and SHA-256 (Sources/CCrypto). sqlite3, zlib and python3-embed:
# the real-library test plugin (Tests/Fixtures/RealLibraries), which also links libcrypto.
for lib in libseccomp libcurl libarchive sqlite3 libcrypto zlib python3-embed; do
  pkg-config --exists "$lib" 2>/dev/null || need+=("$lib")
done
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v cc >/dev/null || need+=(cc)
command -v zstd >/dev/null || need+=(zstd)   # the tests make .tar.zst archives
command -v python3 >/dev/null || need+=(python3)  # the tests' web server
extra=()
tests=0 package=0
for arg in "$@"; do
  case "$arg" in
    --tests) tests=1 ;;
    --package) package=1 ;;
    *) echo "install-deps: unknown option $arg (usage: scripts/install-deps.sh [--tests] [--package])" >&2; exit 64 ;;
  esac
done
# With --package, what scripts/package-deb.sh and scripts/check-deb.sh use: dpkg-shlibdeps (dpkg-dev),
# fakeroot, strip (binutils), patchelf (package-deb.sh --binaries), lintian, setpriv (util-linux); and a Python venv for
# scripts/check-manifests.sh (the Kubernetes schemas come from PyPI's kubernetes-validate).
if [ "$package" = 1 ]; then
  for tool in dpkg-shlibdeps:dpkg-dev fakeroot:fakeroot strip:binutils patchelf:patchelf lintian:lintian setpriv:util-linux; do
    command -v "${tool%%:*}" >/dev/null || { need+=("${tool%%:*}"); extra+=("${tool#*:}"); }
  done
  python3 -c "import venv, ensurepip" 2>/dev/null || { need+=(python3-venv); extra+=(python3-venv python3-pip); }
fi
# With --tests, rustc, cargo and go too: the Rust cdylib and Go c-shared test plugins
# (Tests/Fixtures/RealLibraries) and examples (examples/RustHello, examples/GoHello). The demo and
# the fuzzers do not need them.
if [ "$tests" = 1 ]; then
  command -v rustc >/dev/null || { need+=(rustc); extra+=(rustc); }
  command -v cargo >/dev/null || { need+=(cargo); extra+=(cargo); }   # examples/RustHello
  command -v go >/dev/null || { need+=(go); extra+=(golang-go); }
  # The Python client's suite runs in a virtual environment (scripts/test-python.sh).
  python3 -c "import venv, ensurepip" 2>/dev/null || { need+=(python3-venv); extra+=(python3-venv python3-pip); }
fi
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
echo "installing build dependencies (missing: ${need[*]})" >&2
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq libseccomp-dev libcurl4-openssl-dev libarchive-dev pkg-config gcc zstd python3 \
  libsqlite3-dev libssl-dev zlib1g-dev python3-dev ${extra[@]+"${extra[@]}"} >/dev/null
