#!/usr/bin/env bash
# Publishes the plugin SDK (SDK/, a package of its own: SPEC §11) as a repository whose root is the
# SDK, so plugin authors can depend on it by URL instead of by path:
#
#   scripts/publish-sdk.sh <repository URL or path> <version>
#   # then, in a plugin's Package.swift:
#   .package(url: "<repository URL>", from: "<version>")
#   .product(name: "PluginSDK", package: "<the URL's last part, without .git>")
#
# It splits SDK/'s history out of this repository's committed history (`git subtree split`; nothing
# here changes), pushes it as the branch `main` of the given repository (a bare one is made if the
# path does not exist) and tags it <version>. Uncommitted changes under SDK/ are not published.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 <repository URL or path> <version (like 1.0.0)>" >&2; exit 2; }
dest=$1
version=$2
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] || { echo "publish-sdk: '$version' is not a semantic version" >&2; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
git rev-parse --verify -q HEAD:SDK/Package.swift >/dev/null || { echo "publish-sdk: SDK/Package.swift is not committed" >&2; exit 1; }
if [[ $dest != *://* && ! -e $dest ]]; then git init -q --bare "$dest"; fi
commit=$(git subtree split --prefix SDK -q HEAD)
git push -q "$dest" "$commit:refs/heads/main"
git push -q "$dest" "$commit:refs/tags/$version"
echo "published SDK/ at $(git rev-parse --short HEAD) as $version: $commit" >&2
