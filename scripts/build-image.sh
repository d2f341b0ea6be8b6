#!/usr/bin/env bash
# Builds the container image of dist/container/Containerfile with buildah (docs/operations.md#the-container-image).
#
# Usage: scripts/build-image.sh [--tag TAG]                 the whole Containerfile: the Swift build stage
#                                                           and the Debian 12 slim runtime (pulls both base images)
#        scripts/build-image.sh --local-base [--run] [--tag TAG]
#                                                           without a registry: the runtime stage alone, from a
#                                                           Debian 12 root made here with debootstrap from the
#                                                           apt mirror, with the .deb of scripts/package-deb.sh;
#                                                           --run then starts the supervisor in it with the
#                                                           example plugins, calls them and stops it
# Needs root, buildah, podman, runc and debootstrap (apt-get install buildah podman runc debootstrap).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
tag=localhost/sandboxed-plugins:latest
local_base=0 run=0
while [ $# -gt 0 ]; do
  case "$1" in
    --tag) tag=$2; shift 2 ;;
    --local-base) local_base=1; shift ;;
    --run) run=1; shift ;;
    *) echo "build-image: unknown argument $1 (usage: scripts/build-image.sh [--local-base [--run]] [--tag TAG])" >&2; exit 64 ;;
  esac
done
for tool in buildah podman runc; do
  command -v "$tool" >/dev/null || { echo "build-image: $tool is missing (apt-get install buildah podman runc debootstrap)" >&2; exit 1; }
done
# runc, not crun: crun refuses hosts whose cgroups are in hybrid mode (this VM's). Limits below the
# caller's own: the runtime may not raise them (on this VM even setting them equal is refused).
runtime=(--runtime runc)
limits=(--ulimit nofile=1024:4096 --ulimit nproc=1024:4096)

if [ "$local_base" = 0 ]; then
  exec buildah build "${runtime[@]}" "${limits[@]}" -f dist/container/Containerfile \
    --ignorefile dist/container/containerignore -t "$tag" .
fi

command -v debootstrap >/dev/null || { echo "build-image: debootstrap is missing (apt-get install debootstrap)" >&2; exit 1; }
work="$root/.build-image"
mkdir -p "$work/context/deb"
# 1. The package, as the build stage would make it.
deb=$("$root/scripts/package-deb.sh" --no-lintian)
rm -f "$work"/context/deb/*.deb
cp "$deb" "$work/context/deb/"
# 2. The base: Debian 12 minbase from the mirror apt uses (debian:12-slim is minbase too), once.
base=localhost/debian-12-slim-local:latest
if ! buildah inspect --type image "$base" >/dev/null 2>&1; then
  mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)$/\1/p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  mirror=${mirror:-http://deb.debian.org/debian}
  echo "==> debootstrap --variant=minbase bookworm from $mirror" >&2
  rm -rf "$work/rootfs"
  debootstrap --variant=minbase bookworm "$work/rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 \
    || { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  rm -rf "$work"/rootfs/var/cache/apt/archives/*.deb "$work"/rootfs/var/lib/apt/lists/*
  container=$(buildah from scratch)
  mount=$(buildah mount "$container")
  tar -C "$work/rootfs" -c . | tar -C "$mount" -x
  buildah umount "$container" >/dev/null
  buildah config --cmd /bin/bash "$container"
  buildah commit -q "$container" "$base" >/dev/null
  buildah rm "$container" >/dev/null
  rm -rf "$work/rootfs"
fi
# 3. The runtime stage of the Containerfile, word for word, with the package from the context.
{
  echo 'ARG RUNTIME_IMAGE'
  awk '/^# runtime stage: begin/{on=1} on' dist/container/Containerfile \
    | sed 's|^COPY --from=build /out/ /tmp/deb/$|COPY deb/ /tmp/deb/|'
} > "$work/context/Containerfile"
grep -q '^COPY deb/ /tmp/deb/$' "$work/context/Containerfile" \
  || { echo "build-image: the Containerfile's runtime stage no longer copies /out/ from the build stage" >&2; exit 1; }
echo "==> buildah build (the runtime stage, FROM $base)" >&2
buildah build "${runtime[@]}" "${limits[@]}" --network host --build-arg RUNTIME_IMAGE="$base" \
  -f "$work/context/Containerfile" -t "$tag" "$work/context"
[ "$run" = 1 ] || exit 0

# 4. Start it as the DaemonSet does (dist/kubernetes/daemonset.yaml): its user, no capabilities, no
# new privileges, a read-only root, the home a host folder owned by uid 10001, the runtime's seccomp
# profile left off and /proc unmasked; call the examples.
name=sandboxed-plugins-check-$$
home=$(mktemp -d)
chown 10001:10001 "$home"
trap 'podman "${runtime[@]}" rm -f "$name" >/dev/null 2>&1 || true; rm -rf "$home"' EXIT
podman "${runtime[@]}" run -d --name "$name" "${limits[@]}" --cap-drop=all --security-opt no-new-privileges \
  --read-only -v "$home:/var/lib/sandboxed-plugins" --security-opt seccomp=unconfined --security-opt unmask=ALL "$tag" \
  start --config /etc/sandboxed-plugins/config.json --plugins /usr/lib/sandboxed-plugins/examples >/dev/null
# (Its output read whole, not piped into grep -q: with pipefail, podman's SIGPIPE would fail the test.)
ready() { local log; log=$(podman logs "$name" 2>&1); [[ "$log" == *"supervisor ready"* ]]; }
for _ in $(seq 1 100); do ready && break; sleep 0.2; done
ready || { podman logs "$name" >&2; echo "build-image: the supervisor in the image did not become ready" >&2; exit 1; }
inside() { podman "${runtime[@]}" exec "$name" "$@"; }
inside supervisor status
answer=$(inside supervisor call com.example.greeter greet '{"name":"container"}')
[ "$answer" = '{"greeting":"Hello, container!"}' ] || { echo "build-image: greeter answered $answer" >&2; exit 1; }
inside supervisor call com.example.asyncworks work >/dev/null
inside id -u | grep -qx 10001 || { echo "build-image: the supervisor's user is not 10001" >&2; exit 1; }
inside supervisor stop >/dev/null
code=$(podman "${runtime[@]}" wait "$name")
[ "$code" = 0 ] || { podman logs "$name" >&2; echo "build-image: the supervisor exited with $code" >&2; exit 1; }
echo "==> $tag: the supervisor ran in it as uid 10001 with the example plugins, and stopped cleanly" >&2
