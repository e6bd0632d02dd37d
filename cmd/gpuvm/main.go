// Command gpuvm is the gpuvm command-line client for users and admins.
//
// It is pure Go (CGO_ENABLED=0 builds it for Linux, macOS and Windows);
// offline host commands run the backend binaries rather than link NVML.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Exit codes (documented in the README).
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and failed, or found problems
	exitUsage   = 2 // bad flags or arguments
	// 3 (exitNoServer, client.go): the server is unreachable, refused the
	// token, or none is configured.
)

// usageError marks errors in how the command was called.
type usageError struct{ error }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(exitCode(err, os.Stderr))
}

func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintln(stderr, "gpuvm:", err)
		return exitUsage
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	fmt.Fprintln(stderr, "gpuvm:", err)
	return exitFailure
}

// exitError ends the command with a code, its message already printed.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit %d", e.code) }

// run is the whole CLI; tests call it directly.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	root := newRoot(getenv, stdout, stderr)
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}
