package main

import (
	"strings"
	"testing"
)

// A package that names a Unix-only signal type-checks for Linux and macOS
// and fails for Windows, naming the file, the line and the symbol.
func TestCheck(t *testing.T) {
	tests := []struct {
		goos string
		want string // in the one error; "" for none
	}{
		{"linux", ""},
		{"darwin", ""},
		{"windows", "unixonly.go:8:22: undefined: syscall.SIGUSR1"},
	}
	for _, tt := range tests {
		t.Run(tt.goos, func(t *testing.T) {
			n, errs, err := check(tt.goos, []string{"./testdata/unixonly"})
			if err != nil {
				t.Fatal(err)
			}
			if n == 0 {
				t.Errorf("no imported package was checked")
			}
			switch {
			case tt.want == "" && len(errs) > 0:
				t.Errorf("errors: %q", errs)
			case tt.want != "" && (len(errs) != 1 || !strings.Contains(errs[0], tt.want)):
				t.Errorf("errors %q, want one with %q", errs, tt.want)
			}
		})
	}
	if _, _, err := check("", []string{"./testdata/unixonly"}); err == nil {
		t.Errorf("an empty GOOS was taken")
	}
}
