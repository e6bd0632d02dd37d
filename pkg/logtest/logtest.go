// Package logtest gives tests a log they can read back while it is being
// written: a Buffer safe for concurrent writers, and a debug-level slog
// logger writing into one.
package logtest

import (
	"bytes"
	"log/slog"
	"sync"
)

// Buffer is an io.Writer that many goroutines may write to while a test
// reads what they wrote.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String is everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// New is a text logger at debug level and the buffer it writes into.
func New() (*slog.Logger, *Buffer) {
	buf := &Buffer{}
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}
