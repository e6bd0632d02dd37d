package store

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

func TestUserSSHKeys(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		ctx := context.Background()
		if err := s.CreateUser(ctx, &User{Name: "ann"}); err != nil {
			t.Fatal(err)
		}
		u, err := s.GetUser(ctx, "ann")
		if err != nil || len(SSHKeysOf(u)) != 0 {
			t.Fatalf("a new user keeps keys: %v %v", u, err)
		}
		keys := []string{"ssh-ed25519 AAAA ann@laptop", "ssh-rsa BBBB ann@desk"}
		if err := s.SetUserSSHKeys(ctx, "ann", keys); err != nil {
			t.Fatal(err)
		}
		if u, _ = s.GetUser(ctx, "ann"); !slices.Equal(SSHKeysOf(u), keys) {
			t.Errorf("kept %q, want %q", SSHKeysOf(u), keys)
		}
		for name, bad := range map[string][]string{
			"two lines": {"ssh-ed25519 A\nssh-ed25519 B"}, "empty": {"  "}, "too long": {strings.Repeat("A", MaxSSHKeyBytes+1)},
			"too many": slices.Repeat([]string{"k"}, MaxSSHKeys+1),
		} {
			if err := s.SetUserSSHKeys(ctx, "ann", bad); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", name, err)
			}
		}
		if u, _ = s.GetUser(ctx, "ann"); !slices.Equal(SSHKeysOf(u), keys) {
			t.Errorf("a refused change changed the keys: %q", SSHKeysOf(u))
		}
		if err := s.SetUserSSHKeys(ctx, "ann", nil); err != nil {
			t.Fatal(err)
		}
		if u, _ = s.GetUser(ctx, "ann"); len(SSHKeysOf(u)) != 0 {
			t.Errorf("forgotten keys kept: %q", SSHKeysOf(u))
		}
		if err := s.SetUserSSHKeys(ctx, "nobody", keys); !errors.Is(err, ErrNotFound) {
			t.Errorf("an unknown user: %v", err)
		}
	})
}
