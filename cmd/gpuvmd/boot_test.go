package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

func TestBootTimeoutFlag(t *testing.T) {
	for _, tc := range []struct {
		value, want string
	}{
		{"0s", "--boot-timeout must be positive, not 0s"},
		{"-1m", "--boot-timeout must be positive, not -1m0s"},
		{"soon", `invalid value "soon" for flag -boot-timeout`},
	} {
		err := run(context.Background(), []string{"--boot-timeout", tc.value}, func(string) string { return "" }, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--boot-timeout %s: %v, want %q", tc.value, err, tc.want)
		}
	}
}
