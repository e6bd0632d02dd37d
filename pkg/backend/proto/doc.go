// Package proto holds the gRPC protocol between gpuvmd and its backend plugins,
// generated from backend.proto by generate.sh. Edit backend.proto, then run
// `go generate ./pkg/backend/proto`; never edit the generated files.
package proto

//go:generate sh generate.sh
