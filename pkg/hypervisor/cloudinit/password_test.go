package cloudinit

import (
	"os/exec"
	"strings"
	"testing"
)

func TestHashPassword(t *testing.T) {
	// glibc's test vector for SHA-512 crypt (Drepper's specification).
	got, err := HashPasswordWithSalt("Hello world!", "saltstring")
	want := "$6$saltstring$svn8UoSVapNtMuq1ukKS4tPQd8iKwSMHWjl/O817G3uBnIFNjnQJuesI68u4OTLiBFdcbYEdFCoEOfaS35inz1"
	if err != nil || got != want {
		t.Fatalf("HashPasswordWithSalt = %q, %v; want %q", got, err, want)
	}
	pw, err := NewPassword()
	if err != nil || len(pw) != PasswordLength || strings.Trim(pw, passwordAlphabet) != "" {
		t.Fatalf("NewPassword = %q, %v", pw, err)
	}
	if pw2, _ := NewPassword(); pw2 == pw {
		t.Fatalf("two passwords are the same: %q", pw)
	}
	h, err := HashPassword(pw)
	if err != nil || !hashRE.MatchString(h) || !strings.HasPrefix(h, "$6$") || strings.Contains(h, pw) {
		t.Fatalf("HashPassword = %q, %v", h, err)
	}
	// The seed accepts it.
	c := Config{InstanceID: "i", Hostname: "h", User: "ann", PasswordHash: h}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	// openssl, where installed, makes the same hash from the same salt.
	if _, err := exec.LookPath("openssl"); err == nil {
		salt := strings.Split(h, "$")[2]
		out, err := exec.Command("openssl", "passwd", "-6", "-salt", salt, pw).Output()
		if err != nil {
			t.Fatalf("openssl passwd: %v", err)
		}
		if strings.TrimSpace(string(out)) != h {
			t.Errorf("openssl passwd -6 = %q, we made %q", strings.TrimSpace(string(out)), h)
		}
	}
}

func TestLoginName(t *testing.T) {
	for in, want := range map[string]string{
		"ann":                   "ann",
		"Ann.Smith@corp":        "ann_smith_corp",
		"9lives":                "u9lives",
		"root":                  "gpuvm",
		"":                      "gpuvm",
		"-x":                    "u-x",
		strings.Repeat("a", 40): strings.Repeat("a", 32),
	} {
		if got := LoginName(in); got != want {
			t.Errorf("LoginName(%q) = %q, want %q", in, got, want)
		}
	}
}
