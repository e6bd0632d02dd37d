package store

import (
	"context"
	"fmt"
	"strings"
)

// Limits of a user's kept SSH keys (and of a VM's: pkg/server's create).
const (
	MaxSSHKeys     = 64
	MaxSSHKeyBytes = 16 << 10
)

// CheckSSHKeys says what is wrong with a list of SSH public keys, naming
// the first bad one by its index; nil when each is one non-empty line of
// at most MaxSSHKeyBytes and there are at most MaxSSHKeys.
func CheckSSHKeys(keys []string) error {
	if len(keys) > MaxSSHKeys {
		return fmt.Errorf("at most %d SSH keys, not %d", MaxSSHKeys, len(keys))
	}
	for i, k := range keys {
		switch {
		case len(k) > MaxSSHKeyBytes:
			return fmt.Errorf("ssh key %d: an SSH public key has at most %d bytes", i, MaxSSHKeyBytes)
		case strings.TrimSpace(k) == "" || strings.ContainsAny(k, "\r\n"):
			return fmt.Errorf("ssh key %d: an SSH public key is one non-empty line", i)
		}
	}
	return nil
}

// SetUserSSHKeys replaces the SSH public keys a user keeps for new VMs
// (none: forgets them). Bad keys (CheckSSHKeys) change nothing: ErrInvalid.
func (s *Store) SetUserSSHKeys(ctx context.Context, name string, keys []string) error {
	if err := CheckSSHKeys(keys); err != nil {
		return fmt.Errorf("set the SSH keys of user %q: %w: %v", name, ErrInvalid, err)
	}
	res := s.db.WithContext(ctx).Model(&User{}).Where("name = ?", name).
		Updates(map[string]any{"ssh_keys": strings.Join(keys, "\n"), "updated_at": s.clock()})
	if res.Error != nil {
		return wrap(res.Error, nil, "set the SSH keys of user %q", name)
	}
	if res.RowsAffected == 0 {
		_, err := s.GetUser(ctx, name)
		return err
	}
	return nil
}

// SSHKeysOf are the keys kept in a user's record, in order.
func SSHKeysOf(u *User) []string {
	if u.SSHKeys == "" {
		return []string{}
	}
	return strings.Split(u.SSHKeys, "\n")
}
