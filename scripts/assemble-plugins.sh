#!/usr/bin/env bash
# Builds the C example with plain cc and assembles the example bundles (manifest + library) into
# DEST (default .build/plugins). Expects `swift build` to have run for the configuration CONFIG.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$root/.build/example-plugins}
config=${CONFIG:-debug}
bin=$(cd "$root" && swift build -c "$config" --show-bin-path)
mkdir -p "$dest"
cc -shared -fPIC -O2 -Wall -Werror -I "$root/SDK/Sources/CPluginABI/include" \
   -o "$bin/libchello.so" "$root/examples/CHello/chello.c"
for bundle in "$root"/examples/bundles/*/; do
  name=$(basename "$bundle")
  lib=$(sed -n 's/.*"library": *"\([^"]*\)".*/\1/p' "$bundle/plugin.json" | head -1)
  rm -rf "$dest/$name"
  mkdir -p "$dest/$name"
  cp "$bundle/plugin.json" "$dest/$name/"
  cp "$bin/$lib" "$dest/$name/$lib"
done
echo "$dest"
