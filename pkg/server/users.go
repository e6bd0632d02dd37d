package server

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
)

var (
	// userName is a user's name: as VM names, lower case.
	userName = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	// groupName is a group's name, as policy files name groups.
	groupName = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.@+-]{0,63}$`)
	// tokenName tells a user's tokens apart.
	tokenName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)
)

// maxTokenHours bounds the life of a token: ten years.
const maxTokenHours = 10 * 365 * 24

// maxUserGroups bounds the groups of a user made through the API.
const maxUserGroups = 100

func toAPIUser(u *store.User) api.User {
	out := api.User{Name: u.Name, Admin: u.Admin, Groups: u.Groups, Source: u.Source, DisabledAt: u.DisabledAt,
		Memberships: make([]api.GroupMembership, 0, len(u.Memberships))}
	if out.Groups == nil {
		out.Groups = []string{}
	}
	for _, m := range u.Memberships {
		out.Memberships = append(out.Memberships, api.GroupMembership{Group: m.Group, Source: m.Source})
	}
	if len(out.Memberships) == 0 && len(out.Groups) > 0 {
		// A user the server did not read from its database.
		for _, g := range out.Groups {
			out.Memberships = append(out.Memberships, api.GroupMembership{Group: g, Source: store.SourceLocal})
		}
	}
	if !u.CreatedAt.IsZero() {
		t := u.CreatedAt
		out.CreatedAt = &t
	}
	return out
}

func toAPIToken(user string, t *store.APIToken, now time.Time) api.Token {
	out := api.Token{ID: t.ID, User: user, Name: t.Name, Prefix: t.Prefix, State: api.TokenActive, CreatedAt: t.CreatedAt,
		ExpiresAt: t.ExpiresAt, RevokedAt: t.RevokedAt, LastUsedAt: t.LastUsedAt}
	switch {
	case t.RevokedAt != nil:
		out.State = api.TokenRevoked
	case t.ExpiresAt != nil && !now.Before(*t.ExpiresAt):
		out.State = api.TokenExpired
	}
	return out
}

// requireSelfOrAdmin lets through an admin, or a user asking about
// themself; to anyone else the user is not found, so that nobody learns
// who exists.
func (s *Server) requireSelfOrAdmin(c *gin.Context) {
	u := user(c)
	if !u.Admin && u.Name != c.Param("name") {
		s.writeProblem(c, with(errNotFound, "no user "+strconv.Quote(c.Param("name"))))
		return
	}
	c.Next()
}

// namedUser reads the user of the path, answering 404 when there is none.
func (s *Server) namedUser(c *gin.Context) (*store.User, bool) {
	name := c.Param("name")
	u, err := s.Store.GetUser(c.Request.Context(), name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		s.writeProblem(c, with(errNotFound, "no user "+strconv.Quote(name)))
		return nil, false
	case err != nil:
		s.writeProblem(c, err)
		return nil, false
	}
	return u, true
}

func (s *Server) whoami(c *gin.Context) {
	c.JSON(http.StatusOK, toAPIUser(user(c)))
}

func (s *Server) listUsers(c *gin.Context) {
	us, err := s.Store.ListUsers(c.Request.Context())
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	out := api.UserList{Items: make([]api.User, 0, len(us))}
	for i := range us {
		out.Items = append(out.Items, toAPIUser(&us[i]))
	}
	c.JSON(http.StatusOK, out)
}

func (s *Server) getUser(c *gin.Context) {
	u, ok := s.namedUser(c)
	if !ok {
		return
	}
	c.JSON(http.StatusOK, toAPIUser(u))
}

func (s *Server) createUser(c *gin.Context) {
	var req api.CreateUserRequest
	if !s.decodeJSON(c, &req) {
		return
	}
	auditTarget(c, "user/"+req.Name)
	if !userName.MatchString(req.Name) {
		s.writeProblem(c, withField(errValidation, "name", "a user name is lower-case letters, digits and dashes, starts with a letter, at most 63 characters"))
		return
	}
	if len(req.Groups) > maxUserGroups {
		s.writeProblem(c, withField(errValidation, "groups", fmt.Sprintf("a user is in at most %d groups, not %d", maxUserGroups, len(req.Groups))))
		return
	}
	for i, g := range req.Groups {
		if !groupName.MatchString(g) {
			s.writeProblem(c, withField(errValidation, fmt.Sprintf("groups[%d]", i),
				fmt.Sprintf("%q is not a group name: 1 to 64 letters, digits, '_', '.', '@', '+' or '-', starting with a letter, digit or '_'", g)))
			return
		}
	}
	u := &store.User{Name: req.Name, Admin: req.Admin, Groups: req.Groups}
	err := s.Store.CreateUser(c.Request.Context(), u)
	if errors.Is(err, store.ErrConflict) {
		s.writeProblem(c, withField(errConflict, "name", "there is already a user called "+strconv.Quote(req.Name)))
		return
	}
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	s.log.Info("user created", "user", u.Name, "admin", u.Admin, "groups", u.Groups, "by", user(c).Name)
	auditDetail(c, "admin %t, groups %s", u.Admin, strings.Join(u.Groups, ","))
	c.Header("Location", "/v1/users/"+u.Name)
	c.JSON(http.StatusCreated, toAPIUser(u))
}

func (s *Server) listTokens(c *gin.Context) {
	u, ok := s.namedUser(c)
	if !ok {
		return
	}
	ts, err := s.Store.ListTokens(c.Request.Context(), u.Name)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	now := s.Store.Now()
	out := api.TokenList{Items: make([]api.Token, 0, len(ts))}
	for i := range ts {
		out.Items = append(out.Items, toAPIToken(u.Name, &ts[i], now))
	}
	c.JSON(http.StatusOK, out)
}

func (s *Server) createToken(c *gin.Context) {
	var req api.CreateTokenRequest
	if !s.decodeJSON(c, &req) {
		return
	}
	if !tokenName.MatchString(req.Name) {
		s.writeProblem(c, withField(errValidation, "name", "a token name is 1 to 64 letters, digits, '.', '_', '@' or '-', starting with a letter or digit"))
		return
	}
	now := s.Store.Now()
	var expires *time.Time
	switch {
	case req.ExpiresInHours != 0 && req.ExpiresAt != nil:
		s.writeProblem(c, withField(errValidation, "expires_at", "give expires_in_hours or expires_at, not both"))
		return
	case req.ExpiresInHours < 0 || req.ExpiresInHours > maxTokenHours:
		s.writeProblem(c, withField(errValidation, "expires_in_hours", fmt.Sprintf("expires_in_hours is from 1 to %d (ten years); leave it out for a token that does not expire", maxTokenHours)))
		return
	case req.ExpiresInHours > 0:
		t := now.Add(time.Duration(req.ExpiresInHours) * time.Hour)
		expires = &t
	case req.ExpiresAt != nil:
		if !req.ExpiresAt.After(now) {
			s.writeProblem(c, withField(errValidation, "expires_at", "expires_at is in the past"))
			return
		}
		if req.ExpiresAt.After(now.Add(maxTokenHours * time.Hour)) {
			s.writeProblem(c, withField(errValidation, "expires_at", "expires_at is more than ten years away"))
			return
		}
		expires = req.ExpiresAt
	}
	u, ok := s.namedUser(c)
	if !ok {
		return
	}
	plain, t, err := s.Store.CreateToken(c.Request.Context(), u.Name, req.Name, expires)
	if errors.Is(err, store.ErrConflict) {
		s.writeProblem(c, withField(errConflict, "name", fmt.Sprintf("user %s already has a live token called %q: revoke it or pick another name", u.Name, req.Name)))
		return
	}
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	s.log.Info("token created", "user", u.Name, "token", t.ID, "name", t.Name, "prefix", t.Prefix, "expires", t.ExpiresAt, "by", user(c).Name)
	auditTarget(c, fmt.Sprintf("user/%s/token/%d", u.Name, t.ID))
	auditDetail(c, "token %q", t.Name)
	c.JSON(http.StatusCreated, api.CreatedToken{Token: toAPIToken(u.Name, t, now), Secret: plain})
}

func (s *Server) revokeToken(c *gin.Context) {
	name, ref := c.Param("name"), c.Param("id")
	notFound := with(errNotFound, fmt.Sprintf("user %s has no token %s", name, strconv.Quote(ref)))
	id, err := strconv.ParseInt(ref, 10, 64)
	if err != nil || id <= 0 {
		s.writeProblem(c, notFound)
		return
	}
	err = s.Store.RevokeToken(c.Request.Context(), name, id)
	if errors.Is(err, store.ErrNotFound) {
		s.writeProblem(c, notFound)
		return
	}
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	s.log.Info("token revoked", "user", name, "token", id, "by", user(c).Name)
	c.Status(http.StatusNoContent)
}
