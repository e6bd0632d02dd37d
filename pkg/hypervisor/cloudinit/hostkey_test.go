package cloudinit

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"
)

// hostKeyOf reads the ed25519 key pair back out of a host key cloud-config
// as cloud-init's ssh module would: the private key's block scalar and the
// public line.
func hostKeyOf(t *testing.T, cc string) (private, public string) {
	t.Helper()
	if !strings.HasPrefix(cc, "#cloud-config\n") {
		t.Fatalf("not a cloud-config:\n%s", cc)
	}
	lines := strings.Split(cc, "\n")
	var priv []string
	in := false
	for _, l := range lines {
		switch {
		case l == "  ed25519_private: |":
			in = true
		case in && strings.HasPrefix(l, "    "):
			priv = append(priv, strings.TrimPrefix(l, "    "))
		case strings.HasPrefix(l, "  ed25519_public: "):
			in = false
			public = strings.Trim(strings.TrimPrefix(l, "  ed25519_public: "), `"`)
		default:
			in = false
		}
	}
	return strings.Join(priv, "\n") + "\n", public
}

// masked replaces the key pair in a rendered file by placeholders, so that
// a golden file can hold its shape.
func masked(s string, k *HostKey) string {
	var ind strings.Builder
	for _, l := range strings.Split(strings.TrimRight(k.Private, "\n"), "\n") {
		ind.WriteString("    " + l + "\n")
	}
	s = strings.Replace(s, ind.String(), "    <the ed25519 private key>\n", 1)
	return strings.ReplaceAll(s, k.Public, "<the ed25519 public key>")
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update creates it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test -update rewrites it):\n%s", path, got)
	}
}

// The seed of a VM with a host key installs that key: vendor-data is a
// cloud-config whose ssh_keys hold the pair that NewHostKey made, which
// parse back to one key.
func TestSeedInstallsHostKey(t *testing.T) {
	k, err := NewHostKey("gpuvm-host-key-vm-42")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(k.Public, "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5") || !strings.HasSuffix(k.Public, " gpuvm-host-key-vm-42") ||
		!strings.HasPrefix(k.Private, "-----BEGIN OPENSSH PRIVATE KEY-----\n") {
		t.Fatalf("NewHostKey: public %q, private starts %q", k.Public, k.Private[:min(40, len(k.Private))])
	}
	if s := fmt.Sprint(k) + fmt.Sprintf("%v %+v", k, k); strings.Contains(s, "PRIVATE") {
		t.Errorf("a host key prints its private half: %s", s)
	}
	c := testConfig()
	c.HostKey = k
	files, err := Render(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	vd := string(files[VendorDataFile])
	golden(t, "vendor-data-hostkey.golden", []byte(masked(vd, k)))
	priv, pub := hostKeyOf(t, vd)
	if pub != k.Public {
		t.Errorf("ed25519_public %q, want %q", pub, k.Public)
	}
	signer, err := ssh.ParsePrivateKey([]byte(priv))
	if err != nil {
		t.Fatalf("ed25519_private does not parse: %v\n%s", err, vd)
	}
	want, _, _, _, _ := ssh.ParseAuthorizedKey([]byte(k.Public))
	if !bytes.Equal(signer.PublicKey().Marshal(), want.Marshal()) {
		t.Error("ed25519_private is not the key of ed25519_public")
	}
	// The user-data, a profile's own, is left as it is.
	if bytes.Contains(files["user-data"], []byte("ssh_keys")) || bytes.Contains(files["user-data"], []byte("PRIVATE")) {
		t.Errorf("user-data holds the host key:\n%s", files["user-data"])
	}
	// A seed without one has no vendor-data.
	if files, _ := Render(testConfig(), nil); files[VendorDataFile] != nil {
		t.Errorf("vendor-data without a host key or vendor data: %q", files[VendorDataFile])
	}
}

// With gpuvm's own vendor data (the licensing script) as well, vendor-data
// is a MIME multipart message with both, each whole, in that order.
func TestSeedHostKeyBesideVendorData(t *testing.T) {
	k, err := NewHostKey("")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ vendor, typ string }{
		{"#!/bin/sh\necho licensing\n", "text/x-shellscript"},
		{"#cloud-config\nruncmd: [true]", "text/cloud-config"},
	} {
		c := testConfig()
		c.HostKey, c.VendorData = k, tc.vendor
		files, err := Render(c, nil)
		if err != nil {
			t.Fatal(err)
		}
		vd := files[VendorDataFile]
		if tc.typ == "text/x-shellscript" {
			golden(t, "vendor-data-multipart.golden", []byte(masked(string(vd), k)))
		}
		head, body, _ := bytes.Cut(vd, []byte("\n\n"))
		mt, params, err := mime.ParseMediaType(strings.TrimPrefix(strings.SplitN(string(head), "\n", 2)[0], "Content-Type: "))
		if err != nil || mt != "multipart/mixed" {
			t.Fatalf("vendor-data is %q %v:\n%s", mt, err, vd)
		}
		r := multipart.NewReader(bytes.NewReader(body), params["boundary"])
		var types, bodies []string
		for {
			p, err := r.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%v\n%s", err, vd)
			}
			b, _ := io.ReadAll(p)
			types, bodies = append(types, strings.Split(p.Header.Get("Content-Type"), ";")[0]), append(bodies, string(b))
		}
		if fmt.Sprint(types) != fmt.Sprint([]string{"text/cloud-config", tc.typ}) || len(bodies) != 2 ||
			bodies[0] != hostKeyConfig(k) || bodies[1] != strings.TrimSuffix(tc.vendor, "\n")+"\n" {
			t.Errorf("parts %v:\n%q\nwant the host key's cloud-config, then %q", types, bodies, tc.vendor)
		}
	}
	c := testConfig()
	c.HostKey, c.VendorData = k, "#!/bin/sh\n# "+vendorBoundary+"\n"
	if _, err := Render(c, nil); err == nil || !strings.Contains(err.Error(), "boundary") {
		t.Errorf("vendor data holding the boundary: %v", err)
	}
}

// A host key whose halves are not one key, or that is not ed25519, is
// refused, and the refusal never shows the private key.
func TestValidateHostKey(t *testing.T) {
	a, err := NewHostKey("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewHostKey("b")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		k    HostKey
		want string
	}{
		{"halves of two keys", HostKey{Private: a.Private, Public: b.Public}, "not one key"},
		{"an rsa public line", HostKey{Private: a.Private, Public: "ssh-rsa AAAAB3NzaC1yc2E"}, "ssh-ed25519"},
		{"two lines", HostKey{Private: a.Private, Public: a.Public + "\n" + b.Public}, "one line"},
		{"a private key that is not one", HostKey{Private: "-----BEGIN OPENSSH PRIVATE KEY-----\nAAAA\n-----END OPENSSH PRIVATE KEY-----\n", Public: a.Public}, "private"},
	} {
		c := testConfig()
		c.HostKey = &tc.k
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "PRIVATE KEY") {
			t.Errorf("%s: %v; want an error saying %q, without the key", tc.name, err, tc.want)
		}
	}
	if _, err := NewHostKey("a\nb"); err == nil || !strings.Contains(err.Error(), "comment") {
		t.Errorf("a comment with a newline: %v", err)
	}
}
