package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// hostKeyAlias is the name ssh knows a VM's guest by in known_hosts files,
// whatever the VM is called and wherever it is reached.
func hostKeyAlias(vmID string) string { return "gpuvm-" + vmID }

// hostKeyOptions are ssh's options that choose how a host key is checked:
// when ssh's arguments set one, gpuvm leaves the checking to them.
var hostKeyOptions = []string{"StrictHostKeyChecking", "UserKnownHostsFile", "GlobalKnownHostsFile", "HostKeyAlias", "KnownHostsCommand"}

// knownHostsPath is the known_hosts file of one VM: known_hosts/<VM ID>
// beside gpuvm's configuration file.
func knownHostsPath(getenv func(string) string, vmID string) (string, error) {
	if vmID == "" || strings.ContainsAny(vmID, `/\`) || vmID == "." || vmID == ".." {
		return "", fmt.Errorf("VM ID %q: not a name for a file", vmID)
	}
	cfg, err := configPath(getenv)
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(cfg), "known_hosts", vmID), nil
}

// knownHostsLines are the lines of a VM's known_hosts file: its alias and
// each key ("type base64", the comment dropped). A key gpuvmd sent that is
// not one line of a type and base64 is an error.
func knownHostsLines(vmID string, keys []string) (string, error) {
	var b strings.Builder
	for i, k := range keys {
		f := strings.Fields(k)
		if len(f) < 2 || strings.ContainsAny(k, "\r\n") || strings.ContainsFunc(f[0], func(r rune) bool {
			return !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '@' || r == '.')
		}) {
			return "", fmt.Errorf("gpuvmd's ssh_host_keys[%d] of VM %s is not an SSH public key line", i, vmID)
		}
		if _, err := base64.StdEncoding.DecodeString(f[1]); err != nil {
			return "", fmt.Errorf("gpuvmd's ssh_host_keys[%d] of VM %s is not an SSH public key line: %w", i, vmID, err)
		}
		fmt.Fprintf(&b, "%s %s %s\n", hostKeyAlias(vmID), f[0], f[1])
	}
	return b.String(), nil
}

// pinHostKeys writes the VM's known_hosts file with the host keys gpuvmd
// made for its guest, and returns ssh's options that trust those keys and
// no other: that file alone, and no question (StrictHostKeyChecking=yes),
// so that the first connection is verified and silent.
func pinHostKeys(getenv func(string) string, vmID string, keys []string) ([]string, error) {
	lines, err := knownHostsLines(vmID, keys)
	if err != nil {
		return nil, err
	}
	path, err := knownHostsPath(getenv, vmID)
	if err != nil {
		return nil, err
	}
	if err := writePrivateFile(path, []byte(lines)); err != nil {
		return nil, fmt.Errorf("write the guest's SSH host keys: %w", err)
	}
	return []string{"-o", "UserKnownHostsFile=" + sshPathValue(path), "-o", "StrictHostKeyChecking=yes"}, nil
}

// writePrivateFile replaces path with data, readable by its owner only,
// at once (a file written beside it, then renamed), making its directory.
func writePrivateFile(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = os.Chmod(tmp, 0o600)
	}
	if werr == nil {
		werr = os.Rename(tmp, path)
	}
	if werr != nil {
		return errors.Join(werr, os.Remove(tmp))
	}
	return nil
}

// sshPathValue writes a path as the value of an ssh -o option: ssh
// expands % sequences in it (so % is doubled), and splits it at white
// space unless it is in double quotes (in which \ and " are escaped).
func sshPathValue(path string) string {
	v := strings.ReplaceAll(path, "%", "%%")
	if strings.ContainsAny(v, " \t\"") {
		v = `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
	}
	return v
}
