#!/bin/sh
# Regenerates backend.pb.go and backend_grpc.pb.go from backend.proto with the
# protoc-gen-go and protoc-gen-go-grpc versions pinned in go.mod. The output
# names the protoc version, so CI must run the same protoc (3.21.x) for
# `git diff --exit-code` to hold.
set -eu

cd "$(dirname "$0")"

want="libprotoc 3.21."
have="$(protoc --version)"
case "$have" in
"$want"*) ;;
*)
	echo "generate.sh: need ${want}x for reproducible output, have: $have" >&2
	exit 1
	;;
esac

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

go build -o "$tmp/" google.golang.org/protobuf/cmd/protoc-gen-go google.golang.org/grpc/cmd/protoc-gen-go-grpc

protoc \
	--plugin=protoc-gen-go="$tmp/protoc-gen-go" \
	--plugin=protoc-gen-go-grpc="$tmp/protoc-gen-go-grpc" \
	--proto_path=. \
	--go_out=. --go_opt=paths=source_relative \
	--go-grpc_out=. --go-grpc_opt=paths=source_relative \
	backend.proto
