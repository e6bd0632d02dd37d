#!/usr/bin/env bash
# packaging/build.sh OUTDIR — builds gpuvm's .deb into OUTDIR with nfpm, pinned in go.mod as a tool (go tool nfpm): the
# binaries as `make build` builds them, shell completions and man pages
# generated from the CLI. `make package` runs it.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
GO=${GO:-go}
export CGO_CFLAGS=${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}

# A Debian version: the tag without its v (v1.2.3 -> 1.2.3), else
# 0.0~gitYYYYMMDDHHMMSS.HASH of the commit, +dirty when the tree is.
version=${GPUVM_VERSION:-}
if [ -z "$version" ]; then
	if tag=$(git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null); then
		version=${tag#v}
		version=${version//-/+}
	else
		version="0.0~git$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S).$(git rev-parse --short HEAD)"
		git diff --quiet HEAD 2>/dev/null || version+="+dirty"
	fi
fi
export GPUVM_VERSION=$version

# The staged tree packaging/nfpm.yaml takes its built files from.
root=.cache/pkgroot
rm -rf "$root"
ld="-s -w -X main.version=$version"
mkdir -p "$root/usr/bin" "$root/usr/lib/gpuvm/plugins"
$GO build -trimpath -ldflags "$ld" -o "$root/usr/bin/gpuvmd" ./cmd/gpuvmd
CGO_ENABLED=0 $GO build -trimpath -ldflags "$ld" -o "$root/usr/bin/gpuvm" ./cmd/gpuvm
for p in vgpu mig passthrough; do
	$GO build -trimpath -ldflags "-s -w -X main.Version=$version" -o "$root/usr/lib/gpuvm/plugins/gpuvm-backend-$p" ./plugins/$p
done

# The preinst refuses a downgrade over a newer database schema: it is told
# the newest schema this gpuvmd knows (gpuvmd --version says it).
schema=$("$root/usr/bin/gpuvmd" --version | sed -n 's/.*database schema \([0-9][0-9]*\).*/\1/p')
[ -n "$schema" ] || { echo "build.sh: gpuvmd --version does not name its database schema" >&2; exit 1; }
sed -e "s/@SCHEMA_VERSION@/$schema/" -e "s/@VERSION@/$version/" packaging/scripts/preinst >.cache/preinst
chmod 755 .cache/preinst

cli=$root/usr/bin/gpuvm
mkdir -p "$root/usr/share/bash-completion/completions" "$root/usr/share/zsh/vendor-completions" \
	"$root/usr/share/fish/vendor_completions.d" "$root/usr/share/man/man1" "$root/usr/share/man/man8"
"$cli" completion bash >"$root/usr/share/bash-completion/completions/gpuvm"
"$cli" completion zsh >"$root/usr/share/zsh/vendor-completions/_gpuvm"
"$cli" completion fish >"$root/usr/share/fish/vendor_completions.d/gpuvm.fish"
"$cli" __man "$root/usr/share/man/man1"
# gpuvmd has no cobra tree: its page is its --help, verbatim.
{
	printf '.TH GPUVMD 8 "" "gpuvm %s" "gpuvm manual"\n.SH NAME\ngpuvmd \\- the gpuvm daemon of one GPU server\n' "$version"
	printf '.SH SYNOPSIS\n\\fBgpuvmd\\fP [\\fIflags\\fP]\n.br\n\\fBgpuvmd\\fP migrate-db|backup|restore|join-installation [\\fIflags\\fP]\n'
	printf '.SH OPTIONS\n.nf\n'
	"$root/usr/bin/gpuvmd" --help 2>&1 | grep -v "^gpuvmd: flag: help requested" | sed -e 's/\\/\\\\/g' -e 's/^\./\\\&./' || true
	printf '.fi\n.SH FILES\n/etc/gpuvm/*.hcl, /var/lib/gpuvm, /usr/lib/gpuvm/plugins\n.SH SEE ALSO\n\\fBgpuvm\\fP(1), \\fBgpuvm-admin-doctor\\fP(1), /usr/share/doc/gpuvm/install.md\n'
} >"$root/usr/share/man/man8/gpuvmd.8"
gzip -9n "$root"/usr/share/man/man1/*.1 "$root/usr/share/man/man8/gpuvmd.8"

mkdir -p "$out"
rm -f "$out"/gpuvm_*.deb # the install test takes the one there
$GO tool nfpm package --config packaging/nfpm.yaml --packager deb --target "$out/"
# No .rpm: nfpm would make one from this recipe, but its Depends are
# Debian's names and the maintainer scripts speak dpkg's arguments.
ls -l "$out"/gpuvm*"$version"* 2>/dev/null || ls -l "$out"
