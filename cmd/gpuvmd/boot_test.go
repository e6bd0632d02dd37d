package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

// Bad durations for --boot-timeout and --home-quota-every are refused,
// naming the flag, before anything starts.
func TestDurationFlags(t *testing.T) {
	for _, tc := range []struct {
		flag, value, want string
	}{
		{"--boot-timeout", "0s", "--boot-timeout must be positive, not 0s"},
		{"--boot-timeout", "-1m", "--boot-timeout must be positive, not -1m0s"},
		{"--boot-timeout", "soon", `invalid value "soon" for flag -boot-timeout`},
		{"--home-quota-every", "0s", "--home-quota-every must be a second or more, not 0s"},
		{"--home-quota-every", "10ms", "--home-quota-every must be a second or more, not 10ms"},
		{"--home-quota-every", "often", `invalid value "often" for flag -home-quota-every`},
	} {
		err := run(context.Background(), []string{tc.flag, tc.value}, func(string) string { return "" }, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v, want %q", tc.flag, tc.value, err, tc.want)
		}
	}
}
