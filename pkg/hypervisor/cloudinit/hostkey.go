package cloudinit

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"

	"golang.org/x/crypto/ssh"
)

// HostKey is an SSH host key gpuvm makes for a guest's seed, so that the
// guest's identity is known before it boots: cloud-init's ssh module
// installs it (the ssh_keys of the seed's vendor-data) in place of one it
// would make, and 'gpuvm ssh' trusts its public half and no other key.
type HostKey struct {
	// Private is the ed25519 private key in OpenSSH's format (PEM "OPENSSH
	// PRIVATE KEY"). It lives in the seed only: never store, log or show it.
	Private string
	// Public is its authorized_keys line: "ssh-ed25519 AAAA… comment".
	Public string
}

// String hides the private key from fmt and loggers.
func (k *HostKey) String() string {
	if k == nil {
		return "<nil>"
	}
	return "host key " + k.Public
}

// NewHostKey makes an ed25519 host key; comment ends its public line.
func NewHostKey(comment string) (*HostKey, error) {
	if strings.ContainsFunc(comment, isControl) || len(comment) > 256 {
		return nil, fmt.Errorf("ssh host key: comment %q: want at most 256 printable characters", comment)
	}
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("ssh host key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, comment)
	if err != nil {
		return nil, fmt.Errorf("ssh host key: %w", err)
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("ssh host key: %w", err)
	}
	line := strings.TrimSuffix(string(ssh.MarshalAuthorizedKey(sp)), "\n")
	if comment != "" {
		line += " " + comment
	}
	return &HostKey{Private: string(pem.EncodeToMemory(block)), Public: line}, nil
}

// validate checks that k is an ed25519 key pair whose halves match.
func (k *HostKey) validate() error {
	if !strings.HasPrefix(k.Public, ssh.KeyAlgoED25519+" ") || !keyRE.MatchString(k.Public) {
		return errors.New(`ssh host key: public: want one line "ssh-ed25519 <base64> [comment]"`)
	}
	pub, _, _, _, err := ssh.ParseAuthorizedKey([]byte(k.Public))
	if err != nil {
		return fmt.Errorf("ssh host key: public: %w", err)
	}
	signer, err := ssh.ParsePrivateKey([]byte(k.Private))
	if err != nil {
		return errors.New("ssh host key: private: not an unencrypted OpenSSH private key") // never the key itself
	}
	if string(signer.PublicKey().Marshal()) != string(pub.Marshal()) {
		return errors.New("ssh host key: the private and public halves are not one key")
	}
	return nil
}

// hostKeyConfig is the #cloud-config that installs k as the guest's
// ed25519 host key (cloud-init's ssh module: ssh_keys; the guest's other
// host keys it makes as usual, and ssh clients that know this one ask
// for it).
func hostKeyConfig(k *HostKey) string {
	var b strings.Builder
	b.WriteString("#cloud-config\n")
	b.WriteString("# gpuvm: the SSH host key gpuvm made for this VM, so that 'gpuvm ssh' knows the guest before it boots.\n")
	b.WriteString("ssh_keys:\n  ed25519_private: |\n")
	for _, l := range strings.Split(strings.TrimRight(k.Private, "\n"), "\n") {
		b.WriteString("    " + l + "\n")
	}
	q, _ := funcs["yaml"].(func(any) (string, error))(k.Public)
	b.WriteString("  ed25519_public: " + q + "\n")
	return b.String()
}

// keepHostKeysConfig keeps a guest's SSH host keys when cloud-init runs
// again for a new instance ID (Config.KeepHostKeys).
const keepHostKeysConfig = "#cloud-config\nssh_deletekeys: false\n"

// vendorBoundary separates the parts of a vendor-data of more than one.
const vendorBoundary = "==gpuvm-vendor-data=="

// vendorData is the seed's vendor-data: c.VendorData, the host key's
// cloud-config, or both as one MIME multipart message, which cloud-init
// reads part by part.
func vendorData(c Config) (string, error) {
	type part struct{ typ, name, body string }
	var parts []part
	if c.HostKey != nil {
		parts = append(parts, part{"text/cloud-config", "gpuvm-ssh-host-key.cfg", hostKeyConfig(c.HostKey)})
	}
	if c.KeepHostKeys && c.HostKey == nil {
		parts = append(parts, part{"text/cloud-config", "gpuvm-keep-host-keys.cfg", keepHostKeysConfig})
	}
	if c.Home != nil {
		parts = append(parts, part{"text/x-shellscript", "gpuvm-home.sh", homeScript(c.Home, c.User)}) // home.go
	}
	if len(c.Shares) > 0 {
		parts = append(parts, part{"text/x-shellscript", "gpuvm-shares.sh", sharesScript(c.Shares)}) // shares.go
	}
	if c.Task != nil {
		parts = append(parts, part{"text/x-shellscript", TaskScript, taskScript(c.Task, c.User, c.Home)}) // task.go
	}
	if c.VendorData != "" {
		typ := "text/x-shellscript"
		if strings.HasPrefix(c.VendorData, "#cloud-config") {
			typ = "text/cloud-config"
		}
		parts = append(parts, part{typ, "gpuvm-vendor-data", c.VendorData})
	}
	switch {
	case len(parts) == 0:
		return "", nil
	case len(parts) == 1:
		return parts[0].body, nil
	case strings.Contains(c.VendorData, vendorBoundary):
		return "", fmt.Errorf("vendor-data: holds the MIME boundary %q of the seed", vendorBoundary)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "Content-Type: multipart/mixed; boundary=%q\nMIME-Version: 1.0\n\n", vendorBoundary)
	for _, p := range parts {
		fmt.Fprintf(&b, "--%s\nContent-Type: %s; charset=\"utf-8\"\nMIME-Version: 1.0\nContent-Transfer-Encoding: 8bit\nContent-Disposition: attachment; filename=\"%s\"\n\n%s",
			vendorBoundary, p.typ, p.name, p.body)
		if !strings.HasSuffix(p.body, "\n") {
			b.WriteString("\n")
		}
		b.WriteString("\n") // the line break before a boundary is the boundary's
	}
	fmt.Fprintf(&b, "--%s--\n", vendorBoundary)
	return b.String(), nil
}
