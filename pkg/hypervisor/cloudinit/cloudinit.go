// Package cloudinit makes the cloud-init NoCloud seed of a VM: user-data,
// meta-data and network-config rendered from text templates (templates/
// cloud-init, which an admin may override), in an ISO 9660 image labelled
// "cidata" (REFERENCE.md §5). Pure Go.
package cloudinit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"regexp"
	"strings"
	"text/template"
	"time"

	"github.com/gpuvm/gpuvm/templates"
)

// Label is the volume label cloud-init's NoCloud data source looks for.
const Label = "cidata"

// Files of a NoCloud seed, each rendered from "<name>.tmpl".
var Files = []string{"user-data", "meta-data", "network-config"}

// VendorDataFile is the seed's vendor-data (Config.VendorData), present
// only when there is some: NoCloud reads it beside the others.
const VendorDataFile = "vendor-data"

// Config is what the templates receive.
type Config struct {
	// InstanceID changes when cloud-init must run its per-instance modules
	// again; the VM's UUID is a good one.
	InstanceID string
	// Hostname of the guest: one or more DNS labels.
	Hostname string
	// User is the account created for the VM's owner.
	User string
	// SSHKeys are authorized_keys lines for User.
	SSHKeys []string
	// PasswordHash is a crypt(3) hash ("$6$…", "$y$…") of User's password;
	// empty locks the password.
	PasswordHash string
	// VMID and Owner are gpuvm's names for the VM and its owner (comments
	// and the user's full name).
	VMID  string
	Owner string
	// UserData, when set, is the user-data itself, used as is instead of
	// user-data.tmpl: a profile's own template, rendered by pkg/config
	// (Config.RenderCloudInit). meta-data and network-config still come
	// from the templates.
	UserData string
	// VendorData, when set, is the seed's vendor-data: what gpuvm itself
	// adds to every guest of a kind (the vGPU licensing script of
	// pkg/licensing), run by cloud-init beside the user-data, so that a
	// profile's own template needs no change for it. It holds secrets:
	// never log it.
	VendorData string `json:"-"`
	// HostKey, when set, is the guest's SSH host key (NewHostKey), which
	// the seed's vendor-data installs; its private half is in the seed and
	// nowhere else. Never log it.
	HostKey *HostKey `json:"-"`
	// Extra are more files in the seed's root, which cloud-init ignores:
	// the licensing script of a Windows guest (cloudbase-init reads no
	// vendor-data), which its unattended install's first logon runs from
	// the seed's drive. They may hold secrets: never log them.
	Extra []File `json:"-"`
	// Home, when set, is the owner's home the guest mounts over virtiofs:
	// the seed's vendor-data adds it to /etc/fstab and mounts it (home.go).
	Home *Home
	// Shares are mounted by the vendor-data too (shares.go).
	Shares []Share
	// Task, when set, is the task the VM runs: the seed's vendor-data
	// carries its runner, gpuvm-task.sh (task.go).
	Task *Task `json:"-"`
	// KeepHostKeys, set for a seed that replaces an existing guest's (a
	// task run in its owner's own VM, with an InstanceID of its own so
	// that the runner runs), tells cloud-init to keep the guest's SSH host
	// keys rather than make new ones for the new instance.
	KeepHostKeys bool
}

// maxUserData bounds UserData; cloud-init reads the whole of it.
const maxUserData = 1 << 20

var (
	hostnameRE = regexp.MustCompile(`^[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,61}[a-zA-Z0-9])?)*$`)
	userRE     = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
	hashRE     = regexp.MustCompile(`^\$[0-9a-z]{1,2}\$[./0-9A-Za-z$=,+-]{8,}$`)
	keyRE      = regexp.MustCompile(`^(ssh-(rsa|ed25519|dss)|ecdsa-sha2-nistp(256|384|521)|sk-(ssh-ed25519|ecdsa-sha2-nistp256)@openssh\.com) [A-Za-z0-9+/=]+( [^\x00-\x1f\x7f]*)?$`)
)

// reservedUsers may not be the VM owner's account.
var reservedUsers = map[string]bool{"root": true, "daemon": true, "bin": true, "sys": true, "nobody": true, "sshd": true}

// Validate checks c and names every field that is wrong.
func (c Config) Validate() error {
	var probs []string
	if c.InstanceID == "" || len(c.InstanceID) > 128 || strings.ContainsFunc(c.InstanceID, isControl) {
		probs = append(probs, fmt.Sprintf("instance id %q: want 1 to 128 printable characters", c.InstanceID))
	}
	if len(c.Hostname) > 253 || !hostnameRE.MatchString(c.Hostname) {
		probs = append(probs, fmt.Sprintf("hostname %q: want DNS labels of letters, digits and '-'", c.Hostname))
	}
	if !userRE.MatchString(c.User) {
		probs = append(probs, fmt.Sprintf("user %q: want a lower-case login name of at most 32 characters", c.User))
	} else if reservedUsers[c.User] {
		probs = append(probs, fmt.Sprintf("user %q: reserved", c.User))
	}
	for i, k := range c.SSHKeys {
		if len(k) > 16<<10 || !keyRE.MatchString(k) {
			probs = append(probs, fmt.Sprintf("ssh key %d: not one line of \"<type> <base64> [comment]\"", i+1))
		}
	}
	if c.PasswordHash != "" && !hashRE.MatchString(c.PasswordHash) {
		probs = append(probs, "password hash: not a crypt(3) hash such as $6$… or $y$… (never a clear-text password)")
	}
	for name, v := range map[string]string{"vm id": c.VMID, "owner": c.Owner} {
		if len(v) > 256 || strings.ContainsFunc(v, isControl) {
			probs = append(probs, fmt.Sprintf("%s %q: want at most 256 printable characters", name, v))
		}
	}
	if u := c.UserData; u != "" {
		switch {
		case len(u) > maxUserData:
			probs = append(probs, fmt.Sprintf("user-data: %d bytes, at most %d", len(u), maxUserData))
		case !strings.HasPrefix(u, "#") && !strings.HasPrefix(strings.ToLower(u), "content-type:"):
			probs = append(probs, "user-data: must start with a cloud-init header such as #cloud-config (or be MIME multipart)")
		}
	}
	if v := c.VendorData; v != "" {
		switch {
		case len(v) > maxUserData:
			probs = append(probs, fmt.Sprintf("vendor-data: %d bytes, at most %d", len(v), maxUserData))
		case !strings.HasPrefix(v, "#!") && !strings.HasPrefix(v, "#cloud-config"):
			probs = append(probs, "vendor-data: must be a script (#!) or #cloud-config")
		}
	}
	if c.HostKey != nil {
		if err := c.HostKey.validate(); err != nil {
			probs = append(probs, err.Error())
		}
	}
	if c.Home != nil {
		probs = append(probs, c.Home.problems()...)
	}
	for i := range c.Shares {
		probs = append(probs, c.Shares[i].problems()...)
	}
	if c.Task != nil {
		probs = append(probs, c.Task.problems()...)
	}
	if len(probs) > 0 {
		return fmt.Errorf("cloud-init seed: %s", strings.Join(probs, "; "))
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f || r == 0xfffd }

// DefaultTemplates are the built-in templates (templates/cloud-init).
func DefaultTemplates() fs.FS {
	sub, err := fs.Sub(templates.FS, "cloud-init")
	if err != nil {
		panic(err) // the embedded directory is part of the build
	}
	return sub
}

// funcs are the functions a template may call. yaml writes a string as a
// double-quoted YAML scalar (JSON's quoting is valid YAML), so that no value
// can begin a new key, list or document.
var funcs = template.FuncMap{
	"yaml": func(v any) (string, error) {
		b, err := json.Marshal(v)
		if err != nil {
			return "", err
		}
		return string(b), nil
	},
}

// Render validates c and renders each of Files from "<name>.tmpl" in tmpls
// (DefaultTemplates() when nil). A template an override directory lacks is
// taken from the built-in ones.
func Render(c Config, tmpls fs.FS) (map[string][]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	def := DefaultTemplates()
	if tmpls == nil {
		tmpls = def
	}
	out := map[string][]byte{}
	for _, name := range Files {
		if name == "user-data" && c.UserData != "" {
			out[name] = []byte(c.UserData)
			continue
		}
		src, err := fs.ReadFile(tmpls, name+".tmpl")
		if errors.Is(err, fs.ErrNotExist) && tmpls != def {
			src, err = fs.ReadFile(def, name+".tmpl")
		}
		if err != nil {
			return nil, fmt.Errorf("cloud-init template %s.tmpl: %w", name, err)
		}
		t, err := template.New(name).Funcs(funcs).Option("missingkey=error").Parse(string(src))
		if err != nil {
			return nil, fmt.Errorf("cloud-init template %s.tmpl: %w", name, err)
		}
		var b bytes.Buffer
		if err := t.Execute(&b, c); err != nil {
			return nil, fmt.Errorf("cloud-init template %s.tmpl: %w", name, err)
		}
		out[name] = b.Bytes()
	}
	vd, err := vendorData(c) // hostkey.go
	if err != nil {
		return nil, fmt.Errorf("cloud-init seed: %w", err)
	}
	if vd != "" {
		out[VendorDataFile] = []byte(vd)
	}
	if c.UserData == "" && !bytes.HasPrefix(out["user-data"], []byte("#cloud-config\n")) {
		return nil, fmt.Errorf("cloud-init template user-data.tmpl: output must start with the line #cloud-config")
	}
	return out, nil
}

// Seed renders c and packs it into a NoCloud seed image.
func Seed(c Config, tmpls fs.FS, mtime time.Time) ([]byte, error) {
	files, err := Render(c, tmpls)
	if err != nil {
		return nil, err
	}
	var fl []File
	for _, name := range append(Files, VendorDataFile) {
		if data, ok := files[name]; ok {
			fl = append(fl, File{Name: name, Data: data})
		}
	}
	for _, f := range c.Extra {
		if _, taken := files[f.Name]; taken || f.Name == "" || strings.ContainsAny(f.Name, "/\\") {
			return nil, fmt.Errorf("cloud-init seed: extra file %q: want a plain name that is not one of the seed's own", f.Name)
		}
		fl = append(fl, f)
	}
	return ISO(Label, fl, mtime)
}
