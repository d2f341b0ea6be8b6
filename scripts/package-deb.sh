#!/usr/bin/env bash
# Builds the Debian package (docs/operations.md#the-debian-package): the release binaries and the
# Swift runtime they need under /usr/lib/sandboxed-plugins/, `supervisor` and `supervisor-installer`
# on PATH, the systemd unit, a config file in /etc, the example plugins, and maintainer scripts that
# make the `sandboxed-plugins` system user. Depends come from dpkg-shlibdeps. Then runs lintian.
#
# Usage: scripts/package-deb.sh [--out DIR] [--version VERSION] [--no-lintian] [--binaries DIR] [--fast]
#   --out DIR          where the .deb goes (default .build-deb/)
#   --version VERSION  the package's version (default: what `supervisor --version` prints, else
#                      0~git<date of HEAD>.<commit>)
#   --binaries DIR     package the binaries already built in DIR (e.g. `swift build --show-bin-path`
#                      after scripts/assemble-plugins.sh) instead of making a release build: their
#                      RUNPATH is set to the package's folder with patchelf. CI checks the package
#                      this way, from the build its tests ran on; a release is packaged without it.
# Needs dpkg-dev and lintian (scripts/install-deps.sh --package) and Swift 6 on PATH. The release build
# goes to .build-deb/ (its own scratch path: the toolchain's rpath is left out, so these binaries
# load the runtime copied beside them and never the toolchain's).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
out="$root/.build-deb"
version=""
lint=1
binaries=""
# xz for a release; --fast: gzip -1, for a check of the package (CI's, from the test build's
# binaries), where xz's ~1 minute of one core over 110 MiB of debug binaries buys nothing.
# (lintian in Debian 12 refuses zstd members.)
compression=(-Zxz)
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --version) version=$2; shift 2 ;;
    --no-lintian) lint=0; shift ;;
    --binaries) binaries=$(cd "$2" && pwd); shift 2 ;;
    --fast) compression=(-Zgzip -z1); shift ;;
    *) echo "package-deb: unknown argument $1 (usage: scripts/package-deb.sh [--out DIR] [--version VERSION] [--no-lintian] [--binaries DIR] [--fast])" >&2; exit 64 ;;
  esac
done
for tool in dpkg-deb dpkg-shlibdeps fakeroot; do
  command -v "$tool" >/dev/null || { echo "package-deb: $tool is missing; run scripts/install-deps.sh --package" >&2; exit 1; }
done
pkg=sandboxed-plugins
scratch="$root/.build-deb"
mkdir -p "$scratch" "$out"

# 1. The release build: the executables, the worker's library, the example plugins.
# -no-toolchain-stdlib-rpath: no RUNPATH to the toolchain; instead $ORIGIN (SwiftPM's) and the
# package's folder, so the installed binaries load the runtime copied there, and so do the example
# plugins under examples/<name>/ when they need a runtime library the worker has not loaded
# (AsyncWorks: libFoundation). -z relro -z now: full RELRO, as Debian builds its packages.
products=(supervisor plugin-worker plugin-forkserver PluginWorkerCore supervisor-installer Greeter Welcome AsyncWorks)
if [ -n "$binaries" ]; then
  command -v patchelf >/dev/null || { echo "package-deb: patchelf is missing (--binaries); run scripts/install-deps.sh --package" >&2; exit 1; }
  for file in supervisor plugin-worker plugin-forkserver libPluginWorkerCore.so supervisor-installer libGreeter.so libWelcome.so libAsyncWorks.so; do
    [ -f "$binaries/$file" ] || { echo "package-deb: $binaries/$file is missing (--binaries: build it first: swift build && scripts/assemble-plugins.sh)" >&2; exit 1; }
  done
  bin=$binaries
  echo "==> packaging the binaries in $bin" >&2
else
  echo "==> release build (in $scratch; the first one takes several minutes)" >&2
  started=$(date +%s)
  flags=(-c release --scratch-path "$scratch" -Xswiftc -no-toolchain-stdlib-rpath -Xlinker -rpath -Xlinker "/usr/lib/$pkg"
         -Xlinker -z -Xlinker relro -Xlinker -z -Xlinker now)
  for product in "${products[@]}"; do
    if ! swift build "${flags[@]}" --product "$product" >"$scratch/build-$product.log" 2>&1; then
      cat "$scratch/build-$product.log" >&2; exit 1
    fi
  done
  bin=$(swift build "${flags[@]}" --show-bin-path)
  echo "==> built in $(( $(date +%s) - started )) s" >&2
fi

toolchain_lib=$(cd "$(dirname "$(readlink -f "$(command -v swift)")")/../lib/swift/linux" && pwd)
if [ -z "$version" ]; then
  # `supervisor --version`, where the supervisor has one; else the commit.
  version=$(LD_LIBRARY_PATH="$toolchain_lib" "$bin/supervisor" --version 2>/dev/null | head -1 | tr -d '[:space:]' || true)
  case "$version" in
    [0-9]*) ;;
    *) version="0~git$(git log -1 --format=%cd --date=format:%Y%m%d 2>/dev/null || date +%Y%m%d).$(git rev-parse --short=7 HEAD 2>/dev/null || echo local)" ;;
  esac
fi
arch=$(dpkg --print-architecture)

# 2. The tree.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
tree="$stage/$pkg"
lib="$tree/usr/lib/$pkg"
install -d -m 0755 "$lib" "$tree/usr/bin" "$tree/lib/systemd/system" "$tree/etc/$pkg" \
  "$tree/usr/share/doc/$pkg" "$tree/usr/share/man/man1" "$tree/usr/share/lintian/overrides" "$tree/DEBIAN"
for exe in supervisor plugin-worker plugin-forkserver supervisor-installer; do
  install -m 0755 "$bin/$exe" "$lib/$exe"
done
install -m 0644 "$bin/libPluginWorkerCore.so" "$lib/libPluginWorkerCore.so"
# The example plugins (examples/bundles, as scripts/assemble-plugins.sh lays them out): not served
# unless asked (`supervisor start --plugins /usr/lib/sandboxed-plugins/examples`).
# The C example is compiled here, into the stage (not into the build's folder, which tests may be
# loading from).
cc -shared -fPIC -O2 -D_FORTIFY_SOURCE=2 -Wall -Werror -Wl,-z,relro -Wl,-z,now -I "$root/SDK/Sources/CPluginABI/include" \
   -o "$stage/libchello.so" "$root/examples/CHello/chello.c"
for bundle in "$root"/examples/bundles/*/; do
  name=$(basename "$bundle")
  library=$(sed -n 's/.*"library": *"\([^"]*\)".*/\1/p' "$bundle/plugin.json" | head -1)
  source="$bin/$library"
  [ -f "$stage/$library" ] && source="$stage/$library"
  install -d -m 0755 "$lib/examples/$name"
  install -m 0644 "$bundle/plugin.json" "$lib/examples/$name/plugin.json"
  install -m 0644 "$source" "$lib/examples/$name/$library"
done
# The Swift runtime that these need, from the toolchain that built them (ldd's closure; the
# binaries' RUNPATH is $ORIGIN, so the toolchain's folder is named for ldd alone). A Swift plugin
# loaded by a worker uses the same copies: they are already mapped when it is loaded.
mapfile -t elves < <(find "$lib" -type f \( -name '*.so' -o -perm -u+x \))
for f in "${elves[@]}"; do
  LD_LIBRARY_PATH="$toolchain_lib" ldd "$f" | awk -v dir="$toolchain_lib/" 'index($3, dir) == 1 { print $3 }'
done | sort -u | while read -r so; do install -m 0644 "$so" "$lib/$(basename "$so")"; done
# Binaries of another build (--binaries) name the toolchain's folder: they get the RUNPATH the
# release build links in.
if [ -n "$binaries" ]; then
  for f in "${elves[@]}"; do patchelf --set-rpath "\$ORIGIN:/usr/lib/$pkg" "$f"; done
fi
# Symbols are for debugging builds; .dynsym (what dlopen and dlsym use) stays.
find "$lib" -type f \( -name '*.so' -o -perm -u+x \) -exec strip --strip-unneeded --remove-section=.comment --remove-section=.note {} +
ln -s "../lib/$pkg/supervisor" "$tree/usr/bin/supervisor"
ln -s "../lib/$pkg/supervisor-installer" "$tree/usr/bin/supervisor-installer"

# The unit, pointed at the installed files and the config in /etc.
sed -e "s|/usr/bin/env /opt/sandboxed-plugins/bin/|/opt/sandboxed-plugins/bin/|g" \
    -e '/^# Through env(1), which execs/,/^# \/opt yet, as it stands in the repository/d' \
    -e "s|/opt/sandboxed-plugins/bin/supervisor start --log-format json|/usr/lib/$pkg/supervisor start --config /etc/$pkg/config.json --log-format json|" \
    -e "s|/opt/sandboxed-plugins/bin/|/usr/lib/$pkg/|g" \
    -e "s|^Documentation=.*|Documentation=file:///usr/share/doc/$pkg/operations.md.gz|" \
    -e '/^# Install: the executables together/,/^#   systemctl daemon-reload/c\
# Installed by the sandboxed-plugins package: the executables and the Swift runtime in\
# /usr/lib/sandboxed-plugins, the system user made by its postinst, the config in\
# /etc/sandboxed-plugins/config.json (docs/operations.md#the-debian-package).' \
    "$root/dist/systemd/$pkg.service" > "$tree/lib/systemd/system/$pkg.service"
chmod 0644 "$tree/lib/systemd/system/$pkg.service"
grep -q "ExecStart=/usr/lib/$pkg/supervisor start --config" "$tree/lib/systemd/system/$pkg.service" \
  || { echo "package-deb: the unit's ExecStart was not rewritten; dist/systemd/$pkg.service changed?" >&2; exit 1; }
install -m 0644 "$root/dist/deb/config.json" "$tree/etc/$pkg/config.json"

# Docs, copyright, changelog, man page, lintian overrides.
install -m 0644 "$root/dist/deb/copyright" "$tree/usr/share/doc/$pkg/copyright"
for doc in operations install sandbox; do gzip -9n -c "$root/docs/$doc.md" > "$tree/usr/share/doc/$pkg/$doc.md.gz"; done
sed -e "s|@VERSION@|$version|" -e "s|@DATE@|$(date -R -d "@$(git log -1 --format=%ct 2>/dev/null || date +%s)")|" "$root/dist/deb/changelog" \
  | gzip -9n > "$tree/usr/share/doc/$pkg/changelog.gz"
for page in supervisor.1 supervisor-installer.1; do gzip -9n -c "$root/dist/deb/$page" > "$tree/usr/share/man/man1/$page.gz"; done
install -m 0644 "$root/dist/deb/lintian-overrides" "$tree/usr/share/lintian/overrides/$pkg"

# 3. Control files. Depends: what dpkg-shlibdeps finds for the binaries' system libraries (the
# runtime copied beside them is the package's own), and adduser for the postinst.
for script in postinst prerm postrm; do install -m 0755 "$root/dist/deb/$script" "$tree/DEBIAN/$script"; done
echo "/etc/$pkg/config.json" > "$tree/DEBIAN/conffiles"
shlib=$(mktemp -d)
mkdir -p "$shlib/debian"
printf 'Source: %s\n\nPackage: %s\nArchitecture: any\n' "$pkg" "$pkg" > "$shlib/debian/control"
mapfile -t elves < <(find "$lib" -type f \( -name '*.so' -o -perm -u+x \))
depends=$(cd "$shlib" && dpkg-shlibdeps -O --ignore-missing-info -l"$lib" "${elves[@]}" 2>"$shlib/warnings" | sed -n 's/^shlibs:Depends=//p')
# Its warnings about the runtime beside the binaries (no soname version, no shlibs entry: it is the
# package's own) are expected; anything else is shown.
grep -v -e 'no dependency information found for' -e "can't extract name and version from library name" \
  -e 'could avoid a useless dependency' "$shlib/warnings" >&2 || true
rm -rf "$shlib"
[ -n "$depends" ] || { echo "package-deb: dpkg-shlibdeps found no dependencies" >&2; exit 1; }
size=$(du -sk --exclude=DEBIAN "$tree" | cut -f1)
sed -e "s|@VERSION@|$version|" -e "s|@ARCH@|$arch|" -e "s|@DEPENDS@|adduser, $depends|" -e "s|@SIZE@|$size|" \
  "$root/dist/deb/control" > "$tree/DEBIAN/control"
(cd "$tree" && find . -type f ! -path './DEBIAN/*' -printf '%P\0' | sort -z | xargs -0 md5sum) > "$tree/DEBIAN/md5sums"
chmod 0644 "$tree/DEBIAN/control" "$tree/DEBIAN/conffiles" "$tree/DEBIAN/md5sums"

deb="$out/${pkg}_${version}_${arch}.deb"
fakeroot dpkg-deb --build "${compression[@]}" "$tree" "$deb" >/dev/null
echo "==> $deb ($(du -h "$deb" | cut -f1); installed $(( size / 1024 )) MiB)" >&2
echo "    Depends: adduser, $depends" >&2
if [ "$lint" = 1 ]; then
  command -v lintian >/dev/null || { echo "package-deb: lintian is missing; run scripts/install-deps.sh --package" >&2; exit 1; }
  echo "==> lintian (each tag it still gives is explained in docs/operations.md#the-debian-package)" >&2
  # Every level down to info and pedantic; the tags dist/deb/lintian-overrides overrides (each with
  # its reason there) are not shown. The run fails on any warning or error.
  lintian --info --pedantic --fail-on error,warning --tag-display-limit 0 "$deb" >&2
fi
echo "$deb"
