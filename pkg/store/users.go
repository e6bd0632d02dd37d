package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// CreateUser adds a user and puts it in its groups, creating the groups that
// do not exist yet. A taken name is ErrConflict.
func (s *Store) CreateUser(ctx context.Context, u *User) error {
	if u.Name == "" {
		return fmt.Errorf("create user: %w: empty name", ErrInvalid)
	}
	if u.Source == "" {
		u.Source = SourceLocal
	}
	err := s.Tx(ctx, func(tx *Store) error {
		now := tx.clock()
		u.ID, u.CreatedAt, u.UpdatedAt = 0, now, now
		if err := tx.db.Create(u).Error; err != nil {
			return err
		}
		return tx.setGroups(ctx, u, u.Source)
	})
	return wrap(err, ErrNameTaken, "create user %q", u.Name)
}

// DirectoryUser is who a directory (LDAP, OIDC) says signed in.
type DirectoryUser struct {
	Name   string
	Source string // SourceLDAP or SourceOIDC
	Admin  bool
	Groups []string
	// UID is the directory's uidNumber for the user (LDAP); 0 for none.
	// It becomes the user's stable uid unless another user holds it.
	UID int64
}

// ErrOtherSource: a user of that name exists, from another source (a local
// user, made by an admin): a sign-in does not take it over.
var ErrOtherSource = fmt.Errorf("%w: the user comes from another source", ErrConflict)

// SignInDirectoryUser makes or refreshes the user that a directory signed
// in: made at the first sign-in, then its admin flag and the memberships of
// its source replaced by the directory's (an admin's memberships stay), and
// enabled again. A user of the name from another source is ErrOtherSource.
func (s *Store) SignInDirectoryUser(ctx context.Context, d DirectoryUser) (*User, error) {
	if d.Name == "" || (d.Source != SourceLDAP && d.Source != SourceOIDC) {
		return nil, fmt.Errorf("sign in: %w: user %q from %q", ErrInvalid, d.Name, d.Source)
	}
	var out *User
	err := s.Tx(ctx, func(tx *Store) error {
		u, err := tx.getUser(ctx, "name = ?", d.Name)
		switch {
		case errors.Is(err, gorm.ErrRecordNotFound):
			now := tx.clock()
			u = &User{Name: d.Name, Admin: d.Admin, Source: d.Source, CreatedAt: now, UpdatedAt: now}
			if err := tx.db.Create(u).Error; err != nil {
				return err
			}
		case err != nil:
			return err
		case u.Source != d.Source:
			return ErrOtherSource
		default:
			err := tx.db.Model(&User{}).Where("id = ?", u.ID).
				Updates(map[string]any{"admin": d.Admin, "disabled_at": nil, "updated_at": tx.clock()}).Error
			if err != nil {
				return err
			}
		}
		if err := tx.db.Where("user_id = ? AND source = ?", u.ID, d.Source).Delete(&GroupMember{}).Error; err != nil {
			return err
		}
		u.Groups = d.Groups
		if err := tx.setGroups(ctx, u, d.Source); err != nil {
			return err
		}
		if err := tx.takeDirectoryUID(u, d.UID); err != nil {
			return err
		}
		out, err = tx.getUser(ctx, "id = ?", u.ID)
		return err
	})
	if errors.Is(err, ErrOtherSource) {
		return nil, fmt.Errorf("sign in user %q from %s: %w", d.Name, d.Source, err)
	}
	return out, wrap(err, nil, "sign in user %q from %s", d.Name, d.Source)
}

// SetUserDisabled disables a user (its tokens are refused, its sessions
// ended, its VMs kept) or enables it again; changed says whether it was
// otherwise before.
func (s *Store) SetUserDisabled(ctx context.Context, name string, disabled bool) (changed bool, err error) {
	err = s.Tx(ctx, func(tx *Store) error {
		q := tx.db.Model(&User{}).Where("name = ?", name)
		var res *gorm.DB
		now := tx.clock()
		if disabled {
			res = q.Where("disabled_at IS NULL").Updates(map[string]any{"disabled_at": now, "updated_at": now})
		} else {
			res = q.Where("disabled_at IS NOT NULL").Updates(map[string]any{"disabled_at": nil, "updated_at": now})
		}
		if res.Error != nil {
			return res.Error
		}
		changed = res.RowsAffected > 0
		if !changed {
			_, err := tx.getUser(ctx, "name = ?", name)
			return err
		}
		if disabled {
			return tx.db.Where("user_id IN (SELECT id FROM users WHERE name = ?)", name).Delete(&Session{}).Error
		}
		return nil
	})
	if err != nil {
		return false, wrap(err, nil, "set user %q disabled %t", name, disabled)
	}
	return changed, nil
}

// SetUserGroups replaces the groups of a user.
func (s *Store) SetUserGroups(ctx context.Context, name string, groups []string) error {
	err := s.Tx(ctx, func(tx *Store) error {
		u, err := tx.getUser(ctx, "name = ?", name)
		if err != nil {
			return err
		}
		if err := tx.db.Where("user_id = ?", u.ID).Delete(&GroupMember{}).Error; err != nil {
			return err
		}
		u.Groups = groups
		return tx.setGroups(ctx, u, SourceLocal)
	})
	return wrap(err, nil, "set groups of user %q", name)
}

// setGroups adds the memberships of u.Groups (creating groups), from
// source, and sorts them. A membership the user has already (from another
// source) is kept as it is.
func (s *Store) setGroups(ctx context.Context, u *User, source string) error {
	groups := slices.Clone(u.Groups)
	slices.Sort(groups)
	groups = slices.Compact(groups)
	s.touchQuota()
	for _, g := range groups {
		if g == "" {
			return fmt.Errorf("%w: empty group name", ErrInvalid)
		}
		grp := Group{Name: g, CreatedAt: s.clock()}
		if err := s.db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(&grp).Error; err != nil {
			return err
		}
		if err := s.db.WithContext(ctx).Where("name = ?", g).Take(&grp).Error; err != nil {
			return err
		}
		m := &GroupMember{GroupID: grp.ID, UserID: u.ID, Source: source}
		if err := s.db.WithContext(ctx).Clauses(clause.OnConflict{DoNothing: true}).Create(m).Error; err != nil {
			return err
		}
	}
	u.Groups = groups
	return nil
}

// CreateGroup adds a group; an existing one is left as it is.
func (s *Store) CreateGroup(ctx context.Context, name string) (*Group, error) {
	if name == "" {
		return nil, fmt.Errorf("create group: %w: empty name", ErrInvalid)
	}
	g := Group{Name: name, CreatedAt: s.clock()}
	db := s.db.WithContext(ctx)
	if err := db.Clauses(clause.OnConflict{DoNothing: true}).Create(&g).Error; err != nil {
		return nil, wrap(err, nil, "create group %q", name)
	}
	if err := db.Where("name = ?", name).Take(&g).Error; err != nil {
		return nil, wrap(err, nil, "create group %q", name)
	}
	return &g, nil
}

// ListGroups lists every group by name.
func (s *Store) ListGroups(ctx context.Context) ([]Group, error) {
	var gs []Group
	err := s.db.WithContext(ctx).Order("name").Find(&gs).Error
	return gs, wrap(err, nil, "list groups")
}

// GetUser finds a user by name, with its groups.
func (s *Store) GetUser(ctx context.Context, name string) (*User, error) {
	u, err := s.getUser(ctx, "name = ?", name)
	return u, wrap(err, nil, "get user %q", name)
}

func (s *Store) getUser(ctx context.Context, query string, args ...any) (*User, error) {
	var u User
	if err := s.db.WithContext(ctx).Where(query, args...).Take(&u).Error; err != nil {
		return nil, err
	}
	users := []User{u}
	if err := s.fillGroups(ctx, users); err != nil {
		return nil, err
	}
	return &users[0], nil
}

// ListUsers lists every user by name, with their groups.
func (s *Store) ListUsers(ctx context.Context) ([]User, error) {
	var us []User
	if err := s.db.WithContext(ctx).Order("name").Find(&us).Error; err != nil {
		return nil, wrap(err, nil, "list users")
	}
	return us, wrap(s.fillGroups(ctx, us), nil, "list users")
}

// UserGroups is the groups of each named user, by name ([] for a user in
// none; a name that is no user is left out), in one query: what an
// admission reads of the users, without every user's record (issue #26).
func (s *Store) UserGroups(ctx context.Context, names []string) (map[string][]string, error) {
	out := make(map[string][]string, len(names))
	if len(names) == 0 {
		return out, nil
	}
	var rows []struct {
		User  string
		Group *string
	}
	err := s.db.WithContext(ctx).Table("users AS u").
		Select("u.name AS user, g.name AS \"group\"").
		Joins("LEFT JOIN group_members AS m ON m.user_id = u.id").
		Joins("LEFT JOIN groups AS g ON g.id = m.group_id").
		Where("u.name IN ?", names).Order("u.name, g.name").Scan(&rows).Error
	if err != nil {
		return nil, wrap(err, nil, "read the groups of %d users", len(names))
	}
	for _, r := range rows {
		gs, ok := out[r.User]
		if !ok {
			gs = []string{}
		}
		if r.Group != nil {
			gs = append(gs, *r.Group)
		}
		out[r.User] = gs
	}
	return out, nil
}

func (s *Store) fillGroups(ctx context.Context, us []User) error {
	if len(us) == 0 {
		return nil
	}
	ids := make([]int64, len(us))
	byID := make(map[int64]*User, len(us))
	for i := range us {
		ids[i] = us[i].ID
		byID[us[i].ID] = &us[i]
		us[i].Groups = []string{}
		us[i].Memberships = []Membership{}
	}
	var rows []struct {
		UserID int64
		Name   string
		Source string
	}
	err := s.db.WithContext(ctx).Table("group_members AS m").
		Select("m.user_id AS user_id, g.name AS name, m.source AS source").
		Joins("JOIN groups AS g ON g.id = m.group_id").
		Where("m.user_id IN ?", ids).Order("g.name").Scan(&rows).Error
	if err != nil {
		return err
	}
	for _, r := range rows {
		byID[r.UserID].addMembership(r.Name, r.Source)
	}
	return nil
}

// addMembership adds a group to u's, in the order read (by name).
func (u *User) addMembership(group, source string) {
	u.Groups = append(u.Groups, group)
	u.Memberships = append(u.Memberships, Membership{Group: group, Source: source})
}

// TokenPrefix starts every token gpuvm makes, so that secret scanners and
// people recognise one.
const TokenPrefix = "gpuvm_"

const (
	tokenRandomChars  = 40 // base62: about 238 bits
	tokenPrefixLength = len(TokenPrefix) + 8
	tokenAlphabet     = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	// tokenTouchEvery limits last_used_at writes to one a minute per token.
	tokenTouchEvery = time.Minute
)

// CreateToken makes a token for a user and returns it in plaintext: the only
// time it is seen, since the store keeps only its SHA-256. expiresAt nil: the
// token does not expire. A live token of the user with the same name is
// ErrNameTaken.
func (s *Store) CreateToken(ctx context.Context, user, name string, expiresAt *time.Time) (string, *APIToken, error) {
	return s.createToken(ctx, user, name, expiresAt)
}

func (s *Store) createToken(ctx context.Context, user, name string, expiresAt *time.Time) (string, *APIToken, error) {
	if name == "" {
		return "", nil, fmt.Errorf("create token: %w: empty name", ErrInvalid)
	}
	plain, err := newToken()
	if err != nil {
		return "", nil, fmt.Errorf("create token: %w", err)
	}
	var t *APIToken
	err = s.Tx(ctx, func(tx *Store) error {
		u, err := tx.getUser(ctx, "name = ?", user)
		if err != nil {
			return err
		}
		t = &APIToken{
			UserID:    u.ID,
			Name:      name,
			Hash:      hashToken(plain),
			Prefix:    plain[:tokenPrefixLength],
			CreatedAt: tx.clock(),
			ExpiresAt: utcPtr(expiresAt),
		}
		return tx.db.Create(t).Error
	})
	if err != nil {
		return "", nil, wrap(err, ErrNameTaken, "create token %q of user %q", name, user)
	}
	return plain, t, nil
}

func newToken() (string, error) {
	// Rejection sampling keeps the characters uniform.
	var b strings.Builder
	b.WriteString(TokenPrefix)
	buf := make([]byte, 64)
	for b.Len() < len(TokenPrefix)+tokenRandomChars {
		if _, err := rand.Read(buf); err != nil {
			return "", err
		}
		for _, c := range buf {
			if c >= 248 { // 248 = 4×62
				continue
			}
			b.WriteByte(tokenAlphabet[int(c)%len(tokenAlphabet)])
			if b.Len() == len(TokenPrefix)+tokenRandomChars {
				break
			}
		}
	}
	return b.String(), nil
}

func hashToken(plain string) string {
	sum := sha256.Sum256([]byte(plain))
	return hex.EncodeToString(sum[:])
}

// AuthenticateToken finds the user of a token. The token is looked up by its
// prefix and its hash compared in constant time; an expired or revoked token
// is refused. All refusals are ErrInvalidToken. last_used_at is updated at
// most once a minute.
func (s *Store) AuthenticateToken(ctx context.Context, plain string) (*User, *APIToken, error) {
	if len(plain) != len(TokenPrefix)+tokenRandomChars || !strings.HasPrefix(plain, TokenPrefix) {
		return nil, nil, fmt.Errorf("authenticate: %w: malformed", ErrInvalidToken)
	}
	candidates, err := s.tokenCandidates(ctx, plain[:tokenPrefixLength])
	if err != nil {
		return nil, nil, wrap(err, nil, "authenticate")
	}
	want, _ := hex.DecodeString(hashToken(plain))
	var tok *APIToken
	var u *User
	for i := range candidates {
		got, err := hex.DecodeString(candidates[i].token.Hash)
		if err == nil && subtle.ConstantTimeCompare(got, want) == 1 {
			tok, u = &candidates[i].token, &candidates[i].user
		}
	}
	now := s.clock()
	switch {
	case tok == nil:
		return nil, nil, fmt.Errorf("authenticate: %w: unknown", ErrInvalidToken)
	case tok.RevokedAt != nil:
		return nil, nil, fmt.Errorf("authenticate token %d: %w: revoked", tok.ID, ErrInvalidToken)
	case tok.ExpiresAt != nil && !now.Before(*tok.ExpiresAt):
		return nil, nil, fmt.Errorf("authenticate token %d: %w: expired", tok.ID, ErrInvalidToken)
	}
	if u.DisabledAt != nil {
		return nil, nil, fmt.Errorf("authenticate token %d: %w: user %q disabled", tok.ID, ErrInvalidToken, u.Name)
	}
	if tok.LastUsedAt == nil || now.Sub(*tok.LastUsedAt) >= tokenTouchEvery {
		err := s.db.WithContext(ctx).Model(&APIToken{}).Where("id = ?", tok.ID).Update("last_used_at", now).Error
		if err != nil {
			return nil, nil, wrap(err, nil, "authenticate token %d: touch", tok.ID)
		}
		tok.LastUsedAt = &now
	}
	return u, tok, nil
}

// tokenCandidate is a token whose prefix matched, with its user and the
// user's groups.
type tokenCandidate struct {
	token APIToken
	user  User
}

// tokenUserRow is a row of tokenCandidates' query: a token, its user, and
// one of the user's groups (none: NULL).
type tokenUserRow struct {
	Token       APIToken `gorm:"embedded;embeddedPrefix:t_"`
	User        User     `gorm:"embedded;embeddedPrefix:u_"`
	GroupName   *string  `gorm:"column:g_name"`
	GroupSource *string  `gorm:"column:g_source"`
}

// tokenUserQuery is tokenCandidates' query, its columns named from the
// models as the store's gorm parses them (a column added to users or
// api_tokens is read with them). Built once.
var tokenUserQuery struct {
	once sync.Once
	sql  string
	err  error
}

func (s *Store) tokenUserSQL() (string, error) {
	q := &tokenUserQuery
	q.once.Do(func() {
		cols := []string{"g.name AS g_name", "m.source AS g_source"}
		for _, t := range []struct {
			model any
			alias string
		}{{&APIToken{}, "t"}, {&User{}, "u"}} {
			stmt := &gorm.Statement{DB: s.db}
			if err := stmt.Parse(t.model); err != nil {
				q.err = fmt.Errorf("parse the model of %s: %w", t.alias, err)
				return
			}
			for _, name := range stmt.Schema.DBNames {
				cols = append(cols, fmt.Sprintf("%s.%s AS %s_%s", t.alias, name, t.alias, name))
			}
		}
		q.sql = "SELECT " + strings.Join(cols, ", ") + ` FROM api_tokens AS t
JOIN users AS u ON u.id = t.user_id
LEFT JOIN group_members AS m ON m.user_id = u.id
LEFT JOIN groups AS g ON g.id = m.group_id
WHERE t.prefix = ? ORDER BY t.id, g.name`
	})
	return q.sql, q.err
}

// tokenCandidates reads the tokens of a prefix, each with its user and the
// user's groups, in one query: every authenticated request asks it, and
// on PostgreSQL each query is a round trip (issue #26).
func (s *Store) tokenCandidates(ctx context.Context, prefix string) ([]tokenCandidate, error) {
	q, err := s.tokenUserSQL()
	if err != nil {
		return nil, err
	}
	var rows []tokenUserRow
	if err := s.db.WithContext(ctx).Raw(q, prefix).Scan(&rows).Error; err != nil {
		return nil, err
	}
	var out []tokenCandidate
	for _, r := range rows {
		if len(out) == 0 || out[len(out)-1].token.ID != r.Token.ID {
			r.User.Groups, r.User.Memberships = []string{}, []Membership{}
			out = append(out, tokenCandidate{token: r.Token, user: r.User})
		}
		if r.GroupName != nil {
			src := ""
			if r.GroupSource != nil {
				src = *r.GroupSource
			}
			out[len(out)-1].user.addMembership(*r.GroupName, src)
		}
	}
	return out, nil
}

// ListTokens lists a user's tokens, revoked ones included, newest first.
func (s *Store) ListTokens(ctx context.Context, user string) ([]APIToken, error) {
	var ts []APIToken
	err := s.db.WithContext(ctx).
		Where("user_id = (SELECT id FROM users WHERE name = ?)", user).
		Order("created_at DESC, id DESC").Find(&ts).Error
	return ts, wrap(err, nil, "list tokens of user %q", user)
}

// RevokeToken revokes a token of a user. Revoking a revoked token is a no-op;
// a token of another user is ErrNotFound.
func (s *Store) RevokeToken(ctx context.Context, user string, id int64) error {
	err := s.Tx(ctx, func(tx *Store) error {
		var t APIToken
		err := tx.db.Where("id = ? AND user_id = (SELECT id FROM users WHERE name = ?)", id, user).Take(&t).Error
		if err != nil {
			return err
		}
		if t.RevokedAt != nil {
			return nil
		}
		return tx.db.Model(&APIToken{}).Where("id = ?", id).Update("revoked_at", tx.clock()).Error
	})
	return wrap(err, nil, "revoke token %d of user %q", id, user)
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC().Truncate(time.Microsecond)
	return &u
}
