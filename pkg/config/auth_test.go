package config

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"
)

const ldapOK = `ldap {
  url       = "ldap://127.0.0.1:3890"
  user_base = "ou=people,dc=example,dc=org"
}`

func TestAuthBlock(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		err        string // a diagnostic's summary (an error or a warning); "" for none
		line       int    // the line it points at (the server block starts at 1)
		check      func(t *testing.T, a Auth)
	}{
		{"no block", "", "", 0, func(t *testing.T, a Auth) {
			if a.SessionTTL != 12*time.Hour || !a.Local.Enabled || strings.Join(a.Local.BreakGlass, ",") != "admin" || a.LDAP != nil {
				t.Errorf("auth = %+v", a)
			}
		}},
		{"ldap defaults", "auth {\n" + ldapOK + "\n}", "", 0, func(t *testing.T, a Auth) {
			l := a.LDAP
			if l == nil || l.UserFilter != DefaultLDAPUserFilter || l.UsernameAttribute != "uid" || l.GroupAttribute != "cn" ||
				l.SyncEvery != 15*time.Minute || l.Timeout != 10*time.Second || l.StartTLS || l.InsecureSkipVerify {
				t.Errorf("ldap = %+v", l)
			}
		}},
		{"local off", "auth {\n local {\n enabled = false\n break_glass = [\"root-admin\"]\n }\n" + ldapOK + "\n}", "", 0, func(t *testing.T, a Auth) {
			if a.Local.Enabled || strings.Join(a.Local.BreakGlass, ",") != "root-admin" {
				t.Errorf("local = %+v", a.Local)
			}
		}},
		{"session ttl", "auth {\n session_ttl = \"8h\"\n}", "", 0, func(t *testing.T, a Auth) {
			if a.SessionTTL != 8*time.Hour {
				t.Errorf("session_ttl = %s", a.SessionTTL)
			}
		}},
		{"session too short", "auth {\n session_ttl = \"1m\"\n}", "Invalid session_ttl", 4, nil},
		{"local off alone", "auth {\n local {\n enabled = false\n }\n}", "Only break-glass admins can sign in", 5, nil},
		{"bad break glass", "auth {\n local {\n break_glass = [\"Admin Root\"]\n }\n}", "Invalid break_glass", 5, nil},
		{"bad url", "auth {\n ldap {\n url = \"http://ldap\"\n user_base = \"dc=x\"\n }\n}", "Invalid url", 5, nil},
		{"url with path", "auth {\n ldap {\n url = \"ldap://ldap/dc=x\"\n user_base = \"dc=x\"\n }\n}", "Invalid url", 5, nil},
		{"missing url", "auth {\n ldap {\n user_base = \"dc=x\"\n }\n}", "Missing url", 4, nil},
		{"missing password file", "auth {\n ldap {\n url = \"ldap://127.0.0.1\"\n bind_dn = \"cn=gpuvm,dc=x\"\n user_base = \"dc=x\"\n }\n}", "Missing bind_password_file", 6, nil},
		{"password file alone", "auth {\n ldap {\n url = \"ldap://127.0.0.1\"\n bind_password_file = \"/p\"\n user_base = \"dc=x\"\n }\n}", "bind_password_file without bind_dn", 6, nil},
		{"bad bind dn", "auth {\n ldap {\n url = \"ldap://127.0.0.1\"\n bind_dn = \"gpuvm\"\n bind_password_file = \"/p\"\n user_base = \"dc=x\"\n }\n}", "Invalid bind_dn", 6, nil},
		{"filter without placeholder", "auth {\n ldap {\n url = \"ldap://127.0.0.1\"\n user_base = \"dc=x\"\n user_filter = \"(uid=alice)\"\n }\n}", "Invalid user_filter", 7, nil},
		{"filter broken", "auth {\n ldap {\n url = \"ldap://127.0.0.1\"\n user_base = \"dc=x\"\n user_filter = \"(uid={username}\"\n }\n}", "Invalid user_filter", 7, nil},
		{"group filter without base", "auth {\n ldap {\n url = \"ldap://127.0.0.1\"\n user_base = \"dc=x\"\n admin_groups = [\"a\"]\n }\n}", "Missing group_base", 4, nil},
		{"start_tls on ldaps", "auth {\n ldap {\n url = \"ldaps://ldap\"\n start_tls = true\n user_base = \"dc=x\"\n }\n}", "Invalid start_tls", 6, nil},
		{"clear text", "auth {\n ldap {\n url = \"ldap://ldap.example.org\"\n user_base = \"dc=x\"\n }\n}", "Passwords to the directory in clear text", 5, nil},
		{"insecure warns", "auth {\n ldap {\n url = \"ldaps://ldap\"\n insecure_skip_verify = true\n user_base = \"dc=x\"\n }\n}", "The directory's certificate is not verified", 6, nil},
		{"tls settings without tls", "auth {\n ldap {\n url = \"ldap://127.0.0.1\"\n ca_file = \"/ca.pem\"\n user_base = \"dc=x\"\n }\n}", "TLS settings without TLS", 4, nil},
		{"sync too often", "auth {\n ldap {\n url = \"ldap://127.0.0.1\"\n user_base = \"dc=x\"\n sync_every = \"10s\"\n }\n}", "Invalid sync_every", 7, nil},
		{"oidc defaults", "auth {\n oidc {\n issuer = \"https://id.example.org/\"\n client_id = \"gpuvm\"\n redirect_url = \"https://gpu/v1/auth/oidc/callback\"\n }\n}", "", 0, func(t *testing.T, a Auth) {
			o := a.OIDC
			if o == nil || o.UsernameClaim != "preferred_username" || o.GroupsClaim != "groups" || strings.Join(o.Scopes, " ") != "openid profile email" || o.ClientSecretFile != "" || o.DisplayName != "id.example.org" {
				t.Errorf("oidc = %+v", o)
			}
		}},
		{"oidc display name", "auth {\n oidc {\n issuer = \"https://id.example.org/\"\n client_id = \"gpuvm\"\n redirect_url = \"https://gpu/v1/auth/oidc/callback\"\n display_name = \"Lab ID\"\n }\n}", "", 0, func(t *testing.T, a Auth) {
			if a.OIDC.DisplayName != "Lab ID" {
				t.Errorf("display_name = %q", a.OIDC.DisplayName)
			}
		}},
		{"oidc display name too long", "auth {\n oidc {\n issuer = \"https://id.example.org/\"\n client_id = \"gpuvm\"\n redirect_url = \"https://gpu/cb\"\n display_name = \"" + strings.Repeat("x", 61) + "\"\n }\n}", "Invalid display_name", 8, nil},
		{"oidc missing client", "auth {\n oidc {\n issuer = \"https://id/\"\n redirect_url = \"https://gpu/cb\"\n }\n}", "Missing client_id", 4, nil},
		{"oidc bad issuer", "auth {\n oidc {\n issuer = \"id.example.org\"\n client_id = \"g\"\n redirect_url = \"https://gpu/cb\"\n }\n}", "Invalid issuer", 5, nil},
		{"oidc clear text", "auth {\n oidc {\n issuer = \"http://id.example.org/\"\n client_id = \"g\"\n redirect_url = \"https://gpu/cb\"\n }\n}", "OpenID Connect without TLS", 5, nil},
		{"oidc no openid scope", "auth {\n oidc {\n issuer = \"https://id/\"\n client_id = \"g\"\n redirect_url = \"https://gpu/cb\"\n scopes = [\"profile\"]\n }\n}", "Invalid scopes", 8, nil},
		{"unknown attribute", "auth {\n ldap {\n url = \"ldap://127.0.0.1\"\n user_base = \"dc=x\"\n password = \"x\"\n }\n}", "Unsupported argument", 7, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "server {\n state_dir = \"/srv/gpuvm\"\n" + tc.body + "\n}\n"
			cfg, diags := Parse(Source{Name: "server.hcl", Data: []byte(src)})
			if tc.err == "" {
				if len(diags) > 0 {
					t.Fatal(diags)
				}
				tc.check(t, cfg.Server.Auth)
				return
			}
			expectDiag(t, diags, tc.err, "server.hcl", tc.line)
		})
	}
}

func expectDiag(t *testing.T, diags hcl.Diagnostics, summary, file string, line int) {
	t.Helper()
	var sums []string
	for _, d := range diags {
		sums = append(sums, d.Summary)
		if d.Summary != summary {
			continue
		}
		if d.Subject == nil || d.Subject.Filename != file || d.Subject.Start.Line != line {
			t.Errorf("diagnostic %q points at %v, want %s:%d", d.Summary, d.Subject, file, line)
		}
		return
	}
	t.Errorf("diagnostics %s; want %q", strings.Join(sums, "; "), summary)
}

// TestAuthFiles loads from disk (trusted), where ca_file and
// bind_password_file are read.
func TestAuthFiles(t *testing.T) {
	dir := t.TempDir()
	caPath := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caPath, testCAPEM(t), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pw"), []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "junk.pem"), []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, ca, pw, err string
	}{
		{"good", "ca.pem", "pw", ""},
		{"missing ca", "nope.pem", "pw", "Unreadable ca_file"},
		{"not a ca", "junk.pem", "pw", "Invalid ca_file"},
		{"missing password", "ca.pem", "nope", "Unreadable bind_password_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, "server.hcl")
			src := "server {\n state_dir = \"/srv/gpuvm\"\n auth {\n ldap {\n url = \"ldap://ldap.example.org\"\n start_tls = true\n" +
				" ca_file = \"" + tc.ca + "\"\n bind_dn = \"cn=gpuvm,dc=example,dc=org\"\n bind_password_file = \"" + tc.pw + "\"\n" +
				" user_base = \"ou=people,dc=example,dc=org\"\n }\n }\n}\n"
			if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
				t.Fatal(err)
			}
			cfg, diags := new(Loader).LoadFiles(path)
			if tc.err == "" {
				if len(diags) > 0 {
					t.Fatal(diags)
				}
				if l := cfg.Server.Auth.LDAP; l.CAFile != caPath || l.BindPasswordFile != filepath.Join(dir, "pw") {
					t.Errorf("ldap = %+v: paths are not relative to the file", l)
				}
				return
			}
			line := 7
			if strings.Contains(tc.err, "password") {
				line = 9
			}
			expectDiag(t, diags, tc.err, path, line)
		})
	}
}

func testCAPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}
