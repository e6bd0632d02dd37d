#!/usr/bin/env bash
# fetch-novnc.sh: put noVNC (the npm package @novnc/novnc, pinned below) into
# pkg/server/web/novnc/, which gpuvmd embeds with go:embed for its browser
# console. The package's sha512 integrity is checked against the pinned value
# before anything is unpacked; only its ES modules (core/, vendor/) and its
# licences are kept. Idempotent: nothing is fetched when the pinned version
# is already there.
#
# The tarball comes from `npm pack` when npm is installed, else from the
# registry with curl. GPUVM_NOVNC_TGZ=/path/to/novnc-novnc-X.Y.Z.tgz uses a
# local copy instead (offline builds); it is checked the same way.
set -euo pipefail

VERSION=1.7.0
INTEGRITY=sha512-ucEJOx4T2avIRCleodk7YobZj5O2Ga2AeLfQ69A/yjG9HHba2+PDgwSkN3FttrmG+70ZGx21sElNFouK13RzyA==
REGISTRY=${NPM_CONFIG_REGISTRY:-https://registry.npmjs.org}

log() { printf 'fetch-novnc: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dest=$root/pkg/server/web/novnc
stamp="$VERSION $INTEGRITY"

if [ -f "$dest/VERSION" ] && [ "$(cat "$dest/VERSION")" = "$stamp" ] && [ -f "$dest/core/rfb.js" ]; then
	exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
tgz=$tmp/novnc-novnc-$VERSION.tgz
if [ -n "${GPUVM_NOVNC_TGZ:-}" ]; then
	cp "$GPUVM_NOVNC_TGZ" "$tgz"
elif command -v npm >/dev/null 2>&1; then
	log "npm pack @novnc/novnc@$VERSION"
	(cd "$tmp" && npm pack --silent "@novnc/novnc@$VERSION" >/dev/null) ||
		die "npm pack @novnc/novnc@$VERSION failed (is the npm registry reachable?)"
elif command -v curl >/dev/null 2>&1; then
	url="$REGISTRY/@novnc/novnc/-/novnc-$VERSION.tgz"
	log "downloading $url"
	curl -fsSL --retry 3 -o "$tgz" "$url" || die "cannot download $url"
else
	die "need npm or curl to fetch @novnc/novnc@$VERSION (or set GPUVM_NOVNC_TGZ to its tarball)"
fi
[ -s "$tgz" ] || die "no tarball for @novnc/novnc@$VERSION"

# npm's integrity: "sha512-" and the base64 of the tarball's SHA-512.
if command -v openssl >/dev/null 2>&1; then
	got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 | tr -d '\n')"
else
	got="sha512-$(sha512sum "$tgz" | cut -d' ' -f1 | xxd -r -p | base64 | tr -d '\n')"
fi
[ "$got" = "$INTEGRITY" ] || die "@novnc/novnc@$VERSION has integrity $got, pinned $INTEGRITY: refusing it"

mkdir -p "$tmp/x"
tar -xzf "$tgz" -C "$tmp/x" --no-same-owner --no-same-permissions
pkg=$tmp/x/package
[ -f "$pkg/core/rfb.js" ] || die "the package has no core/rfb.js: not the noVNC layout this script knows"
grep -q "\"version\": \"$VERSION\"" "$pkg/package.json" || die "the package says it is not version $VERSION"

# Replace what is there, keeping the committed README.md.
find "$dest" -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +
mkdir -p "$dest/docs"
cp -R "$pkg/core" "$pkg/vendor" "$dest/"
cp "$pkg/LICENSE.txt" "$pkg/AUTHORS" "$dest/"
cp "$pkg"/docs/LICENSE* "$dest/docs/"
chmod -R u+rwX,go+rX "$dest"
printf '%s\n' "$stamp" >"$dest/VERSION"
log "noVNC $VERSION is in ${dest#"$root"/}"
