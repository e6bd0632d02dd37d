// Package ldap signs people in with their directory password: a search for
// the user's entry with the service account, a bind as that entry with the
// password given, and the user's groups read from the directory. It also
// tells which users the directory still has (the sync).
//
// Every value typed by a person that goes into a filter is escaped
// (ldap.EscapeFilter, RFC 4515), so a name such as "*)(uid=*" matches
// nobody. TLS (ldaps:// or StartTLS) verifies the directory's certificate
// against the configured CA file, or the system's roots, unless the
// configuration turns that off.
package ldap

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	goldap "github.com/go-ldap/ldap/v3"

	"github.com/gpuvm/gpuvm/pkg/auth"
	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/store"
)

var (
	// userName is a gpuvm user's name (pkg/server's).
	userName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	// groupName is a group's name as policy files name groups.
	groupName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.@+-]{0,63}$`)
)

// Bounds of what a person may type.
const (
	maxUsername = 256
	maxPassword = 1024
	// maxGroups bounds the groups read for one user.
	maxGroups = 1000
)

// Directory is an LDAP directory that people sign in with.
type Directory struct {
	cfg          config.LDAP
	bindPassword string
	tls          *tls.Config
	log          *slog.Logger
}

// New prepares a directory from its configuration, reading the service
// account's password and the CA file. It does not connect.
func New(cfg config.LDAP, log *slog.Logger) (*Directory, error) {
	if log == nil {
		log = slog.Default()
	}
	d := &Directory{cfg: cfg, log: log.With("component", "ldap", "url", cfg.URL)}
	u, err := url.Parse(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("ldap url %q: %w", cfg.URL, err)
	}
	if cfg.BindPasswordFile != "" {
		b, err := os.ReadFile(cfg.BindPasswordFile)
		if err != nil {
			return nil, fmt.Errorf("ldap bind password: %w", err)
		}
		d.bindPassword = strings.TrimRight(string(b), "\r\n")
		if d.bindPassword == "" {
			return nil, fmt.Errorf("ldap bind password: %s is empty", cfg.BindPasswordFile)
		}
	}
	d.tls = &tls.Config{ServerName: u.Hostname(), MinVersion: tls.VersionTLS12, InsecureSkipVerify: cfg.InsecureSkipVerify} //nolint:gosec // the admin's explicit choice, warned about
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ldap ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ldap ca_file %s: no PEM certificate", cfg.CAFile)
		}
		d.tls.RootCAs = pool
	}
	if cfg.InsecureSkipVerify {
		d.log.Warn("the directory's certificate is NOT verified (server.auth.ldap.insecure_skip_verify = true): anyone on the way can pose as the directory and read people's passwords")
	}
	return d, nil
}

// conn is a connection to the directory, bound as the service account.
func (d *Directory) connect(ctx context.Context) (*goldap.Conn, error) {
	timeout := d.cfg.Timeout
	if timeout <= 0 {
		timeout = config.DefaultLDAPTimeout
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = max(time.Until(dl), time.Millisecond)
	}
	c, err := goldap.DialURL(d.cfg.URL, goldap.DialWithDialer(&net.Dialer{Timeout: timeout}), goldap.DialWithTLSConfig(d.tls))
	if err != nil {
		return nil, fmt.Errorf("connect to the directory: %w", err)
	}
	c.SetTimeout(timeout)
	if d.cfg.StartTLS {
		if err := c.StartTLS(d.tls); err != nil {
			c.Close()
			return nil, fmt.Errorf("StartTLS with the directory: %w", err)
		}
	}
	if err := d.bindService(c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (d *Directory) bindService(c *goldap.Conn) error {
	if d.cfg.BindDN == "" {
		return nil // anonymous
	}
	if err := c.Bind(d.cfg.BindDN, d.bindPassword); err != nil {
		return fmt.Errorf("bind as the service account %q: %w", d.cfg.BindDN, err)
	}
	return nil
}

// filter fills the placeholders of a configured filter with values,
// escaped.
func filter(tmpl string, values map[string]string) string {
	pairs := make([]string, 0, 2*len(values))
	for k, v := range values {
		pairs = append(pairs, "{"+k+"}", goldap.EscapeFilter(v))
	}
	return strings.NewReplacer(pairs...).Replace(tmpl)
}

// findUser searches the one entry of a username; none or several is a
// refusal.
func (d *Directory) findUser(c *goldap.Conn, username string) (*goldap.Entry, error) {
	req := goldap.NewSearchRequest(d.cfg.UserBase, goldap.ScopeWholeSubtree, goldap.NeverDerefAliases, 2, 0, false,
		filter(d.cfg.UserFilter, map[string]string{"username": username}), []string{d.cfg.UsernameAttribute, uidNumberAttribute}, nil)
	res, err := c.Search(req)
	switch {
	case goldap.IsErrorWithCode(err, goldap.LDAPResultSizeLimitExceeded):
		return nil, auth.Refuse("the name matches several entries")
	case goldap.IsErrorWithCode(err, goldap.LDAPResultNoSuchObject):
		return nil, auth.Refuse("no such user")
	case err != nil:
		return nil, fmt.Errorf("search the user: %w", err)
	case len(res.Entries) == 0:
		return nil, auth.Refuse("no such user")
	case len(res.Entries) > 1:
		return nil, auth.Refuse("the name matches several entries")
	}
	return res.Entries[0], nil
}

// SignIn checks a username and password with the directory: it finds the
// user's entry with the service account and binds as it. A refusal for
// the credentials is an *auth.Refusal (auth.ErrInvalidCredentials).
func (d *Directory) SignIn(ctx context.Context, username, password string) (auth.Identity, error) {
	// An empty password would be an unauthenticated bind, which
	// directories answer with success (RFC 4513 5.1.2).
	switch {
	case username == "" || password == "":
		return auth.Identity{}, auth.Refuse("empty username or password")
	case len(username) > maxUsername || len(password) > maxPassword:
		return auth.Identity{}, auth.Refuse("username or password too long")
	case strings.ContainsRune(username, 0) || strings.ContainsRune(password, 0):
		return auth.Identity{}, auth.Refuse("NUL in the username or password")
	}
	c, err := d.connect(ctx)
	if err != nil {
		return auth.Identity{}, err
	}
	defer c.Close()
	entry, err := d.findUser(c, username)
	if err != nil {
		return auth.Identity{}, err
	}
	if err := c.Bind(entry.DN, password); err != nil {
		if goldap.IsErrorWithCode(err, goldap.LDAPResultInvalidCredentials) {
			return auth.Identity{}, &auth.Refusal{Reason: "wrong password", Account: strings.ToLower(entry.GetAttributeValue(d.cfg.UsernameAttribute))}
		}
		return auth.Identity{}, fmt.Errorf("bind as %q: %w", entry.DN, err)
	}
	name := strings.ToLower(entry.GetAttributeValue(d.cfg.UsernameAttribute))
	if !userName.MatchString(name) {
		return auth.Identity{}, auth.Refuse(fmt.Sprintf("the entry's %s %q is not a gpuvm user name", d.cfg.UsernameAttribute, name))
	}
	// Groups are read as the service account, as the sync would.
	if err := d.bindService(c); err != nil {
		return auth.Identity{}, err
	}
	groups, err := d.groups(c, entry.DN, name)
	if err != nil {
		return auth.Identity{}, err
	}
	id := auth.Identity{Name: name, Source: store.SourceLDAP, Groups: groups, UID: uidNumber(entry)}
	for _, g := range groups {
		if slices.Contains(d.cfg.AdminGroups, g) {
			id.Admin = true
		}
	}
	return id, nil
}

// groups reads the names of a user's groups, sorted. Names that cannot be
// a policy's group are left out (and logged).
func (d *Directory) groups(c *goldap.Conn, dn, username string) ([]string, error) {
	if d.cfg.GroupBase == "" {
		return []string{}, nil
	}
	req := goldap.NewSearchRequest(d.cfg.GroupBase, goldap.ScopeWholeSubtree, goldap.NeverDerefAliases, maxGroups, 0, false,
		filter(d.cfg.GroupFilter, map[string]string{"dn": dn, "username": username}), []string{d.cfg.GroupAttribute}, nil)
	res, err := c.Search(req)
	if err != nil && !goldap.IsErrorWithCode(err, goldap.LDAPResultNoSuchObject) {
		return nil, fmt.Errorf("search the groups of %q: %w", dn, err)
	}
	groups := []string{}
	if res == nil {
		return groups, nil
	}
	for _, e := range res.Entries {
		for _, g := range e.GetAttributeValues(d.cfg.GroupAttribute) {
			if !groupName.MatchString(g) {
				d.log.Warn("directory group left out: not a gpuvm group name", "group", g, "entry", e.DN)
				continue
			}
			groups = append(groups, g)
		}
	}
	slices.Sort(groups)
	return slices.Compact(groups), nil
}

// UserStore is what the sync needs of the store.
type UserStore interface {
	ListUsers(ctx context.Context) ([]store.User, error)
	SetUserDisabled(ctx context.Context, name string, disabled bool) (bool, error)
}

// Sync looks up every directory user of the store in the directory, with
// the service account: one that is gone is disabled, one that is back is
// enabled. An error of the directory stops it before anything changes
// further, so that an unreachable directory disables nobody.
func (d *Directory) Sync(ctx context.Context, st UserStore) ([]auth.Change, error) {
	users, err := st.ListUsers(ctx)
	if err != nil {
		return nil, err
	}
	c, err := d.connect(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var changes []auth.Change
	for _, u := range users {
		if u.Source != store.SourceLDAP {
			continue
		}
		if err := ctx.Err(); err != nil {
			return changes, err
		}
		_, err := d.findUser(c, u.Name)
		var gone bool
		switch {
		case errors.Is(err, auth.ErrInvalidCredentials):
			gone = true
		case err != nil:
			return changes, fmt.Errorf("sync: look up %q: %w", u.Name, err)
		}
		if gone == (u.DisabledAt != nil) {
			continue
		}
		changed, err := st.SetUserDisabled(ctx, u.Name, gone)
		if err != nil {
			return changes, err
		}
		if changed {
			changes = append(changes, auth.Change{User: u.Name, Disabled: gone})
		}
	}
	return changes, nil
}

// uidNumberAttribute is RFC 2307's posixAccount uid.
const uidNumberAttribute = "uidNumber"

// uidNumber is an entry's uidNumber when it is a uid a person may have
// (1000 and up, below nobody's 65534 or above it, short of (uid_t)-1); 0
// otherwise, and gpuvm assigns one.
func uidNumber(e *goldap.Entry) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(e.GetAttributeValue(uidNumberAttribute)), 10, 64)
	if err != nil || n < 1000 || n == 65534 || n >= 1<<32-2 {
		return 0
	}
	return n
}
