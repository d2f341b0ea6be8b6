#!/usr/bin/env bash
# CI's check of the Debian package (docs/operations.md#the-debian-package): builds it
# (scripts/package-deb.sh, lintian included), installs it with apt, runs `supervisor` from the
# installed files as the package's system user, with the installed example plugins, calls them,
# stops it, purges the package and checks that nothing of it is left. Needs root (CI is root) and a
# machine where the package is not installed otherwise. Prints how long each part took. Arguments
# go to package-deb.sh (CI passes `--binaries <the test build>`: no second build, and `--fast`:
# gzip -1 instead of xz).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
[ "$(id -u)" -eq 0 ] || { echo "check-deb: run as root (it installs and removes the package)" >&2; exit 1; }
"$root/scripts/install-deps.sh" --package
pkg=sandboxed-plugins
lib=/usr/lib/$pkg
home=/var/lib/$pkg
export DEBIAN_FRONTEND=noninteractive
t0=$(date +%s)
deb=$("$root/scripts/package-deb.sh" "$@")
t1=$(date +%s)

if dpkg -s "$pkg" >/dev/null 2>&1; then
  echo "check-deb: $pkg is installed already; purging it first" >&2
  apt-get purge -y -qq "$pkg" >/dev/null
fi
log=$(mktemp)
out=$(mktemp)
sv_pid=""
user_before=0
getent passwd "$pkg" >/dev/null && user_before=1
# Also after a failure: the package purged, and the user gone if the package made it.
cleanup() {
  [ -n "$sv_pid" ] && kill -9 "$sv_pid" 2>/dev/null || true
  if dpkg -s "$pkg" >/dev/null 2>&1; then apt-get purge -y -qq "$pkg" >/dev/null 2>&1 || true; fi
  if [ "$user_before" = 0 ] && getent passwd "$pkg" >/dev/null; then
    deluser --system --quiet "$pkg" >/dev/null 2>&1 || true
    delgroup --system --quiet "$pkg" >/dev/null 2>&1 || true
  fi
  rm -f "$log" "$out"
}
trap cleanup EXIT
fail() { echo "check-deb: $*" >&2; [ -s "$log" ] && { echo "--- the supervisor's log:" >&2; tail -50 "$log" >&2; }; exit 1; }

echo "==> apt-get install $deb" >&2
apt-get install -y -qq --no-install-recommends "$deb" >/dev/null || fail "apt-get install failed"
[ "$(readlink -f "$(command -v supervisor)")" = "$lib/supervisor" ] || fail "supervisor on PATH is not $lib/supervisor"
getent passwd "$pkg" >/dev/null || fail "the postinst made no $pkg user"
[ -f "/lib/systemd/system/$pkg.service" ] || fail "no systemd unit"
dpkg-query -W -f='${Conffiles}\n' "$pkg" | grep -q "/etc/$pkg/config.json" || fail "/etc/$pkg/config.json is not a conffile"
# Every library from the package or the system, none from the Swift toolchain (a host that has none).
for f in "$lib"/supervisor "$lib"/plugin-worker "$lib"/plugin-forkserver "$lib"/supervisor-installer "$lib"/libPluginWorkerCore.so; do
  bad=$(env -i ldd "$f" | grep -e 'not found' -e '/swift/' || true)
  [ -z "$bad" ] || fail "$f does not load from the package alone: $bad"
done
if command -v systemd-analyze >/dev/null; then
  systemd-analyze verify "/lib/systemd/system/$pkg.service" || fail "systemd-analyze verify refused the installed unit"
fi

# `supervisor --version`, where this supervisor has the option.
if supervisor --help 2>&1 | grep -q -e '--version'; then
  supervisor --version || fail "supervisor --version failed"
else
  echo "    (this supervisor has no --version option; the package's version is $(dpkg-query -W -f='${Version}' "$pkg"))" >&2
fi
# The publisher's tool runs from the package too (libcurl, libarchive, libcrypto, Foundation).
keys=$(mktemp -d)
supervisor-installer keygen "$keys/k" >/dev/null || fail "supervisor-installer keygen failed"
rm -rf "$keys"

# The service's way, without systemd: its user, its home (StateDirectory= would make it), its
# config, an environment with nothing from this shell (no toolchain on PATH or in LD_LIBRARY_PATH).
echo "==> supervisor start as $pkg with $lib/examples" >&2
install -d -o "$pkg" -g "$pkg" -m 0750 "$home"
env -i PATH=/usr/bin:/bin HOME="$home" SUPERVISOR_HOME="$home" \
  setpriv --reuid="$pkg" --regid="$pkg" --init-groups \
  supervisor start --config "/etc/$pkg/config.json" --plugins "$lib/examples" >"$out" 2>"$log" &
sv_pid=$!
for _ in $(seq 1 300); do grep -q ready "$out" && break; kill -0 "$sv_pid" 2>/dev/null || break; sleep 0.1; done
grep -q ready "$out" || fail "the installed supervisor did not become ready"
export SUPERVISOR_HOME=$home
supervisor status
answer=$(supervisor call com.example.greeter greet '{"name":"Ada"}') || fail "call greeter.greet failed"
[ "$answer" = '{"greeting":"Hello, Ada!"}' ] || fail "greeter answered $answer"
answer=$(supervisor call com.example.welcome welcome) || fail "call welcome.welcome (a call from one plugin to another) failed"
answer=$(supervisor call com.example.chello add '[40, 2]') || fail "call chello.add failed"
[ "$answer" = 42 ] || fail "chello answered $answer"
# AsyncWorks links libFoundation, which the worker does not load itself: found through the
# plugin's RUNPATH in the package's folder.
supervisor call com.example.asyncworks work >/dev/null || fail "call asyncworks.work failed"
failed=$(supervisor status --json | grep -o '"state":"failed"' || true)
[ -z "$failed" ] || fail "a plugin failed: $(supervisor status)"
layers=$(supervisor status --json)
echo "$layers" | grep -q '"seccomp"' || fail "the workers run without seccomp: $layers"
echo "$layers" | grep -q '"landlock"' || echo "    (no landlock layer on this kernel)" >&2
supervisor stop >/dev/null
rc=0; wait "$sv_pid" || rc=$?
sv_pid=""
[ "$rc" = 0 ] || fail "the supervisor exited with $rc"
t2=$(date +%s)

echo "==> apt-get purge $pkg" >&2
apt-get purge -y -qq "$pkg" >/dev/null || fail "apt-get purge failed"
dpkg -s "$pkg" >/dev/null 2>&1 && fail "$pkg is still known to dpkg after the purge"
for path in "$lib" /usr/bin/supervisor /usr/bin/supervisor-installer "/lib/systemd/system/$pkg.service" \
            "/etc/$pkg" "$home" "/usr/share/doc/$pkg" /usr/share/man/man1/supervisor.1.gz; do
  [ ! -e "$path" ] && [ ! -L "$path" ] || fail "$path is left after the purge"
done
pgrep -u "$pkg" >/dev/null && fail "processes of $pkg are left after the purge"
# The system user stays, as Debian leaves system users (docs/operations.md); when the package made
# it, cleanup removes it, so that the next run on this machine starts as on a new one.
getent passwd "$pkg" >/dev/null || fail "the purge removed the $pkg user (Debian leaves system users)"
t3=$(date +%s)
echo "check-deb: $(basename "$deb") ($(du -h "$deb" | cut -f1)): built and linted in $((t1 - t0)) s, installed and run in $((t2 - t1)) s, purged in $((t3 - t2)) s; nothing left" >&2
