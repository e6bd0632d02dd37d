package server

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/auth"
)

// bobSpellings are names the directory (slapd: uid is caseIgnoreMatch)
// takes for bob.
var bobSpellings = []string{"bob", " bob", "bob ", "bob  ", "  bob  ", "BOB", "Bob", "bOb", "\u00a0bob", "bob\u3000"}

// The per-user sign-in limit holds for the account, however its name is
// spelt: failures under one spelling block every other, with the right
// password too; and a name the directory finds by another attribute
// (bob@example.org) counts as the entry it finds.
func TestLoginLimitHoldsForEverySpelling(t *testing.T) {
	old := loginFailureFloor
	loginFailureFloor = time.Millisecond
	t.Cleanup(func() { loginFailureFloor = old })
	e := newLoginEnv(t, "")
	e.s.SignIn = aliasDirectory{e.s.SignIn, map[string]string{"bob@example.org": "bob"}}
	spellings := append(bobSpellings, "bob@example.org")
	for _, sp := range spellings {
		e.s.loginLimits = newLoginLimits()
		if rec, _ := e.login(t, sp, "bob-pw"); rec.Code != http.StatusOK {
			t.Errorf("%q is bob to the directory, yet signing in with bob's password: %d %s", sp, rec.Code, rec.Body)
		}
	}
	for _, sp := range spellings {
		for _, tc := range []struct{ failAs, then string }{{"bob", sp}, {sp, "bob"}} {
			e.s.loginLimits = newLoginLimits()
			for i := range loginPerUser {
				if rec, _ := e.login(t, tc.failAs, "wrong"); rec.Code != http.StatusUnauthorized {
					t.Fatalf("failure %d as %q: %d %s", i, tc.failAs, rec.Code, rec.Body)
				}
			}
			if rec, _ := e.login(t, tc.then, "bob-pw"); rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
				t.Errorf("after %d failures as %q, %q with the right password: %d, want 429", loginPerUser, tc.failAs, tc.then, rec.Code)
			}
		}
	}
	// Failures spread over the spellings add up.
	e.s.loginLimits = newLoginLimits()
	for i := range loginPerUser {
		e.login(t, spellings[i%len(spellings)], "wrong")
	}
	if rec, _ := e.login(t, "bob", "bob-pw"); rec.Code != http.StatusTooManyRequests {
		t.Errorf("after %d failures under several spellings: %d, want 429", loginPerUser, rec.Code)
	}
	// Others are not blocked with bob.
	if rec, _ := e.login(t, "alice", "alice-pw"); rec.Code != http.StatusOK {
		t.Errorf("alice while bob is blocked: %d", rec.Code)
	}
}

// aliasDirectory is a directory whose user filter also takes other names
// of an entry (a mail address): it asks the real one for the entry's uid.
type aliasDirectory struct {
	PasswordSignIn
	alias map[string]string
}

func (d aliasDirectory) SignIn(ctx context.Context, username, password string) (auth.Identity, error) {
	if uid, ok := d.alias[username]; ok {
		username = uid
	}
	return d.PasswordSignIn.SignIn(ctx, username, password)
}

// loginKey is one key for the names a directory takes for one account,
// and keeps apart those it does not.
func TestLoginKey(t *testing.T) {
	// Those, and what RFC 4518 maps to a space or to nothing.
	for _, sp := range append(bobSpellings, "\tbob", "bob\n", "\u200bbob", "b\u00adob", "bob\ufe0f", "\ufeffbob") {
		if got := loginKey(sp); got != "bob" {
			t.Errorf("loginKey(%q) = %q, want bob", sp, got)
		}
	}
	for _, tc := range []struct{ name, want string }{
		{"ｂｏｂ", "bob"},         // fullwidth: NFKC
		{"STRASSE", "strasse"}, // folded
		{"straße", "strasse"},  // full case folding
		{" ann  marie ", "ann marie"},
		{"bobb", "bobb"},
		{"b ob", "b ob"},
		{"", ""},
	} {
		if got := loginKey(tc.name); got != tc.want {
			t.Errorf("loginKey(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
}
