#!/usr/bin/env bash
# fetch-portal.sh: put the web portal's npm packages, pinned below, where the
# build and the tests find them:
#
#   htm (its preact/standalone module: Preact, its hooks and htm in one
#   13 KB ES module) into pkg/portal/assets/vendor/, which gpuvmd embeds
#   with go:embed;
#   axe-core (axe.min.js, the accessibility checker) into
#   pkg/portal/testdata/axe-core/, which only the portal's browser tests
#   inject into the pages they check (never embedded).
#
# Each package's sha512 integrity is checked against the pinned value before
# anything is unpacked. Idempotent: nothing is fetched when the pinned
# version is already there.
#
# The tarballs come from `npm pack` when npm is installed, else from the
# registry with curl. GPUVM_HTM_TGZ=/path/to/htm-X.Y.Z.tgz and
# GPUVM_AXE_TGZ=/path/to/axe-core-X.Y.Z.tgz use local copies instead
# (offline builds); they are checked the same way.
set -euo pipefail

HTM_VERSION=3.1.1
HTM_INTEGRITY=sha512-983Vyg8NwUE7JkZ6NmOqpCZ+sh1bKv2iYTlUkzlWmA5JD2acKoxd4KVxbMmxX/85mtfdnDmTFoNKcg5DGAvxNQ==
AXE_VERSION=4.14.1
AXE_INTEGRITY=sha512-FHfa+lmNjQZfJz1q8wKqIDwC6DExcHt/pkjNQb09a3NPjCKg2rhu5qb2S4r76ASyFNNtuFooJpZe37OgudVGtQ==
REGISTRY=${NPM_CONFIG_REGISTRY:-https://registry.npmjs.org}

log() { printf 'fetch-portal: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# fetch NAME VERSION INTEGRITY LOCAL: the package's tarball, checked, unpacked
# under $tmp/NAME; LOCAL is the offline copy's path, if any. Prints the
# unpacked package's directory.
fetch() {
	local name=$1 version=$2 integrity=$3 local=$4
	local tgz=$tmp/$name-$version.tgz
	if [ -n "$local" ]; then
		cp "$local" "$tgz"
	elif command -v npm >/dev/null 2>&1; then
		log "npm pack $name@$version"
		(cd "$tmp" && npm pack --silent "$name@$version" >/dev/null) ||
			die "npm pack $name@$version failed (is the npm registry reachable?)"
	elif command -v curl >/dev/null 2>&1; then
		local url="$REGISTRY/$name/-/$name-$version.tgz"
		log "downloading $url"
		curl -fsSL --retry 3 -o "$tgz" "$url" || die "cannot download $url"
	else
		die "need npm or curl to fetch $name@$version (or set its GPUVM_*_TGZ to its tarball)"
	fi
	[ -s "$tgz" ] || die "no tarball for $name@$version"
	# npm's integrity: "sha512-" and the base64 of the tarball's SHA-512.
	local got
	if command -v openssl >/dev/null 2>&1; then
		got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 | tr -d '\n')"
	else
		got="sha512-$(sha512sum "$tgz" | cut -d' ' -f1 | xxd -r -p | base64 | tr -d '\n')"
	fi
	[ "$got" = "$integrity" ] || die "$name@$version has integrity $got, pinned $integrity: refusing it"
	mkdir -p "$tmp/$name"
	tar -xzf "$tgz" -C "$tmp/$name" --no-same-owner --no-same-permissions
	grep -q "\"version\": \"$version\"" "$tmp/$name/package/package.json" || die "the package says it is not $name@$version"
	printf '%s\n' "$tmp/$name/package"
}

# current DEST STAMP FILE: whether DEST holds the pinned version already.
current() { [ -f "$1/VERSION" ] && [ "$(cat "$1/VERSION")" = "$2" ] && [ -f "$1/$3" ]; }

# Replace what is in DEST, keeping the committed README.md.
clear_dest() {
	mkdir -p "$1"
	find "$1" -mindepth 1 -maxdepth 1 ! -name README.md -exec rm -rf {} +
}

dest=$root/pkg/portal/assets/vendor
stamp="$HTM_VERSION $HTM_INTEGRITY"
if ! current "$dest" "$stamp" preact-htm.js; then
	pkg=$(fetch htm "$HTM_VERSION" "$HTM_INTEGRITY" "${GPUVM_HTM_TGZ:-}")
	[ -f "$pkg/preact/standalone.module.js" ] || die "htm has no preact/standalone.module.js: not the layout this script knows"
	clear_dest "$dest"
	cp "$pkg/preact/standalone.module.js" "$dest/preact-htm.js"
	cp "$pkg/LICENSE" "$dest/LICENSE-htm-preact"
	chmod -R u+rwX,go+rX "$dest"
	printf '%s\n' "$stamp" >"$dest/VERSION"
	log "htm $HTM_VERSION (Preact standalone) is in ${dest#"$root"/}"
fi

dest=$root/pkg/portal/testdata/axe-core
stamp="$AXE_VERSION $AXE_INTEGRITY"
if ! current "$dest" "$stamp" axe.min.js; then
	pkg=$(fetch axe-core "$AXE_VERSION" "$AXE_INTEGRITY" "${GPUVM_AXE_TGZ:-}")
	[ -f "$pkg/axe.min.js" ] || die "axe-core has no axe.min.js: not the layout this script knows"
	clear_dest "$dest"
	cp "$pkg/axe.min.js" "$pkg/LICENSE" "$dest/"
	chmod -R u+rwX,go+rX "$dest"
	printf '%s\n' "$stamp" >"$dest/VERSION"
	log "axe-core $AXE_VERSION is in ${dest#"$root"/}"
fi
