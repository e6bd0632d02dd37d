package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/auth/ldap"
	"github.com/gpuvm/gpuvm/pkg/auth/ldap/ldaptest"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/config"
)

// TestPasswordLogin: gpuvm login URL --user NAME against a real slapd,
// the password from the standard input (not a terminal); whoami says where
// the groups come from; logout ends the session.
func TestPasswordLogin(t *testing.T) {
	srv := ldaptest.Start(t, nil)
	dir, err := ldap.New(config.LDAP{
		URL: srv.URL, StartTLS: true, CAFile: srv.CAFile, BindDN: ldaptest.ServiceDN, BindPasswordFile: srv.ServicePasswordFile,
		UserBase: ldaptest.People, UserFilter: config.DefaultLDAPUserFilter, UsernameAttribute: "uid",
		GroupBase: ldaptest.Groups, GroupFilter: config.DefaultLDAPGroupFilter, GroupAttribute: "cn", Timeout: 5 * time.Second,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	env := clienttest.New(t, clienttest.Options{SignIn: dir})
	home := t.TempDir()
	c := newCLI(t, map[string]string{"HOME": home})

	c.term = &terminal{in: strings.NewReader("wrong\n")}
	if _, errOut, code := c.run("login", env.URL, "--user", "alice"); code != exitNoServer || !strings.Contains(errOut, "the username or password is wrong") {
		t.Errorf("wrong password: exit %d %q", code, errOut)
	}
	c.term = &terminal{in: strings.NewReader("alice-pw\n")}
	out := c.must("login", env.URL, "--user", "alice")
	if !strings.HasPrefix(out, "Signed in to "+env.URL+" as alice, groups: ml101 (ldap) until ") {
		t.Errorf("login: %q", out)
	}
	saved, err := os.ReadFile(filepath.Join(home, ".config", "gpuvm", "config.hcl"))
	if err != nil || !strings.Contains(string(saved), `token = "gpuvm_`) {
		t.Fatalf("saved config: %s %v", saved, err)
	}
	c.term = nil
	if out := c.must("whoami"); out != "alice (from ldap), groups: ml101 (ldap) on "+env.URL+"\n" {
		t.Errorf("whoami: %q", out)
	}
	if out := c.must("logout"); !strings.Contains(out, "session ended") {
		t.Errorf("logout: %q", out)
	}
	if _, _, code := c.run("whoami"); code == 0 {
		t.Error("whoami works after logout")
	}
	if out := c.must("logout"); !strings.Contains(out, "Not logged in") {
		t.Errorf("logout again: %q", out)
	}
	if _, errOut, code := c.run("login", env.URL, "--user", "alice", "--token", "x"); code != 2 || !strings.Contains(errOut, "not both") {
		t.Errorf("--user and --token: exit %d %q", code, errOut)
	}
}
