package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gpuvm/gpuvm/pkg/store"
)

// AdminTokenFile is where gpuvmd writes the first admin's token, in its
// state directory.
const AdminTokenFile = "admin.token"

// UserStore is what bootstrapping needs of the store.
type UserStore interface {
	GetUser(ctx context.Context, name string) (*store.User, error)
	CreateUser(ctx context.Context, u *store.User) error
	CreateToken(ctx context.Context, user, name string, expiresAt *time.Time) (string, *store.APIToken, error)
	ListTokens(ctx context.Context, user string) ([]store.APIToken, error)
}

// EnsureAdmin creates the user "admin" and a token for it on first start,
// writing the token to STATE_DIR/admin.token (mode 0600). It returns the
// file's path and whether it was created now. Later starts change nothing.
func EnsureAdmin(ctx context.Context, st UserStore, stateDir string) (string, bool, error) {
	path := filepath.Join(stateDir, AdminTokenFile)
	_, err := st.GetUser(ctx, "admin")
	switch {
	case err == nil:
		// A start killed between creating the user and writing the file
		// left an admin without a token: finish the job.
		tokens, err := st.ListTokens(ctx, "admin")
		if err != nil {
			return "", false, fmt.Errorf("list the admin's tokens: %w", err)
		}
		if len(tokens) > 0 {
			return path, false, nil
		}
	case errors.Is(err, store.ErrNotFound):
		if err := st.CreateUser(ctx, &store.User{Name: "admin", Admin: true}); err != nil {
			return "", false, fmt.Errorf("create the admin user: %w", err)
		}
	default:
		return "", false, fmt.Errorf("look up the admin user: %w", err)
	}
	plain, _, err := st.CreateToken(ctx, "admin", "bootstrap", nil)
	if err != nil {
		return "", false, fmt.Errorf("create the admin token: %w", err)
	}
	tmp, err := os.CreateTemp(stateDir, ".admin-token-*")
	if err != nil {
		return "", false, fmt.Errorf("write the admin token: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return "", false, fmt.Errorf("write the admin token: %w", err)
	}
	_, werr := tmp.WriteString(plain + "\n")
	serr := tmp.Sync()
	if err := errors.Join(werr, serr, tmp.Close()); err != nil {
		return "", false, fmt.Errorf("write the admin token: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", false, fmt.Errorf("write the admin token: %w", err)
	}
	return path, true, nil
}
