package config

import (
	"crypto/x509"
	"encoding/json"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/go-ldap/ldap/v3"
	"github.com/hashicorp/hcl/v2"
)

// Auth says how people sign in (server.auth).
type Auth struct {
	// SessionTTL is how long a session token from a sign-in (POST
	// /v1/login) lives.
	SessionTTL time.Duration `json:"session_ttl"`
	Local      LocalAuth     `json:"local"`
	// LDAP is nil without an ldap block, OIDC without an oidc block.
	LDAP *LDAP `json:"ldap,omitempty"`
	OIDC *OIDC `json:"oidc,omitempty"`
}

// OIDC signs people in with an OpenID provider (pkg/auth/oidc):
// authorization code with PKCE.
type OIDC struct {
	// Issuer is the provider's URL; its discovery document is
	// Issuer/.well-known/openid-configuration.
	Issuer   string `json:"issuer"`
	ClientID string `json:"client_id"`
	// ClientSecretFile holds the client's secret ("": a public client,
	// PKCE alone).
	ClientSecretFile string `json:"client_secret_file,omitempty"`
	// RedirectURL is gpuvmd's callback as the provider knows it:
	// https://HOST/v1/auth/oidc/callback.
	RedirectURL string `json:"redirect_url"`
	// DeviceClientID is the client of device sign-ins (gpuvm login
	// --sso), with the same secret; "": ClientID.
	DeviceClientID string `json:"device_client_id,omitempty"`
	// DisplayName names the provider on the portal's sign-in button
	// ("Sign in with DisplayName"); "": the issuer's host name.
	DisplayName   string   `json:"display_name"`
	Scopes        []string `json:"scopes"`
	UsernameClaim string   `json:"username_claim"`
	GroupsClaim   string   `json:"groups_claim"`
	AdminGroups   []string `json:"admin_groups"`
	// AllowedGroups, when set, lets in only their members.
	AllowedGroups []string `json:"allowed_groups"`
}

// MarshalJSON writes durations as whole seconds.
func (a Auth) MarshalJSON() ([]byte, error) {
	type plain Auth
	return json.Marshal(struct {
		plain
		SessionTTL int64 `json:"session_ttl"`
	}{plain(a), secs(a.SessionTTL)})
}

// LocalAuth is gpuvm's own users, made by an admin, and their tokens.
// Enabled false refuses the tokens of local users, but for the admins
// named in BreakGlass, so that an admin still gets in when the directory
// is down.
type LocalAuth struct {
	Enabled    bool     `json:"enabled"`
	BreakGlass []string `json:"break_glass"`
}

// LDAP signs people in with their directory password (pkg/auth/ldap).
type LDAP struct {
	// URL is ldap://host[:port] or ldaps://host[:port].
	URL string `json:"url"`
	// StartTLS upgrades an ldap:// connection before anything is sent.
	StartTLS bool `json:"start_tls"`
	// CAFile verifies the directory's certificate ("": the system's
	// roots); InsecureSkipVerify does not verify it at all.
	CAFile             string `json:"ca_file,omitempty"`
	InsecureSkipVerify bool   `json:"insecure_skip_verify"`
	// BindDN and the password in BindPasswordFile are the service account
	// that searches users and groups; "" binds anonymously.
	BindDN           string `json:"bind_dn,omitempty"`
	BindPasswordFile string `json:"bind_password_file,omitempty"`
	// UserFilter finds a user under UserBase; {username} is replaced by
	// the escaped username. UsernameAttribute names the gpuvm user.
	UserBase          string `json:"user_base"`
	UserFilter        string `json:"user_filter"`
	UsernameAttribute string `json:"username_attribute"`
	// GroupFilter finds a user's groups under GroupBase ("": no groups
	// from the directory); {dn} and {username} are replaced, escaped.
	// GroupAttribute is the attribute that names a group.
	GroupBase      string   `json:"group_base,omitempty"`
	GroupFilter    string   `json:"group_filter"`
	GroupAttribute string   `json:"group_attribute"`
	AdminGroups    []string `json:"admin_groups"`
	// SyncEvery is how often users who left the directory are disabled;
	// 0: never.
	SyncEvery time.Duration `json:"sync_every"`
	// Timeout bounds one exchange with the directory.
	Timeout time.Duration `json:"timeout"`
}

// MarshalJSON writes durations as whole seconds.
func (l LDAP) MarshalJSON() ([]byte, error) {
	type plain LDAP
	return json.Marshal(struct {
		plain
		SyncEvery int64 `json:"sync_every"`
		Timeout   int64 `json:"timeout"`
	}{plain(l), secs(l.SyncEvery), secs(l.Timeout)})
}

// Defaults and bounds of the auth block.
const (
	DefaultSessionTTL         = 12 * time.Hour
	minSessionTTL             = 5 * time.Minute
	maxSessionTTL             = 30 * 24 * time.Hour
	DefaultLDAPUserFilter     = "(&(objectClass=inetOrgPerson)(uid={username}))"
	DefaultLDAPUsernameAttr   = "uid"
	DefaultLDAPGroupFilter    = "(&(objectClass=groupOfNames)(member={dn}))"
	DefaultLDAPGroupAttribute = "cn"
	DefaultLDAPSyncEvery      = 15 * time.Minute
	DefaultLDAPTimeout        = 10 * time.Second
	minLDAPSyncEvery          = time.Minute
)

var (
	// userNamePattern is a gpuvm user's name (pkg/server's userName).
	userNamePattern = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	// ldapAttributePattern is an attribute description (RFC 4512): a
	// name or an OID.
	ldapAttributePattern = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9-]{0,63}|[0-9]+(\.[0-9]+)+)$`)
)

// DefaultBreakGlass is the local admin that still signs in with local
// auth off: the one gpuvmd makes on first start.
var DefaultBreakGlass = []string{"admin"}

func (r *resolver) resolveAuth(b *authBlock) {
	a := &r.cfg.Server.Auth
	if b == nil {
		b = &authBlock{DefRange: r.cfg.Server.DeclRange}
	}
	var ok bool
	a.SessionTTL, ok = r.duration(b.Body, "session_ttl", b.SessionTTL, DefaultSessionTTL, b.DefRange)
	if ok && (a.SessionTTL < minSessionTTL || a.SessionTTL > maxSessionTTL) {
		r.errf(valueRange(b.Body, "session_ttl", b.DefRange), "Invalid session_ttl",
			"A session lasts from %s to %s; %s was given.", FormatDuration(minSessionTTL), FormatDuration(maxSessionTTL), FormatDuration(a.SessionTTL))
		a.SessionTTL = DefaultSessionTTL
	}
	a.Local = LocalAuth{Enabled: true, BreakGlass: DefaultBreakGlass}
	if l := b.Local; l != nil {
		if l.Enabled != nil {
			a.Local.Enabled = *l.Enabled
		}
		if l.BreakGlass != nil {
			a.Local.BreakGlass = []string{}
			for i, n := range l.BreakGlass {
				if !userNamePattern.MatchString(n) {
					r.errf(listItemRange(l.Body, "break_glass", i, l.DefRange), "Invalid break_glass",
						"%q is not a user name: lower-case letters, digits and dashes, starting with a letter.", n)
					continue
				}
				a.Local.BreakGlass = append(a.Local.BreakGlass, n)
			}
			r.checkDuplicates(l.Body, "break_glass", l.BreakGlass, l.DefRange)
		}
	}
	if b.LDAP != nil {
		a.LDAP = r.resolveLDAP(b.LDAP)
	}
	if b.OIDC != nil {
		a.OIDC = r.resolveOIDC(b.OIDC)
	}
	if !a.Local.Enabled && a.LDAP == nil && a.OIDC == nil {
		rng := b.DefRange
		if b.Local != nil {
			rng = valueRange(b.Local.Body, "enabled", b.Local.DefRange)
		}
		r.warnf(rng, "Only break-glass admins can sign in",
			"local auth is off and no other way of signing in is configured: only %s can use gpuvm.", quoteList(a.Local.BreakGlass))
	}
}

func (r *resolver) resolveLDAP(b *ldapBlock) *LDAP {
	l := &LDAP{
		UserFilter:        str(b.UserFilter, DefaultLDAPUserFilter),
		UsernameAttribute: str(b.UsernameAttribute, DefaultLDAPUsernameAttr),
		GroupFilter:       str(b.GroupFilter, DefaultLDAPGroupFilter),
		GroupAttribute:    str(b.GroupAttribute, DefaultLDAPGroupAttribute),
		AdminGroups:       []string{},
		BindDN:            str(b.BindDN, ""),
		UserBase:          str(b.UserBase, ""),
		GroupBase:         str(b.GroupBase, ""),
	}
	for _, req := range []struct {
		name string
		p    *string
	}{{"url", b.URL}, {"user_base", b.UserBase}} {
		if req.p == nil {
			r.errf(b.DefRange, "Missing "+req.name, "The ldap block needs %s.", req.name)
		}
	}
	l.URL = str(b.URL, "")
	urlRange := valueRange(b.Body, "url", b.DefRange)
	u, err := url.Parse(l.URL)
	switch {
	case b.URL == nil:
		u = nil
	case err != nil:
		r.errf(urlRange, "Invalid url", "%q is not a URL: %v.", l.URL, err)
	case u.Scheme != "ldap" && u.Scheme != "ldaps":
		r.errf(urlRange, "Invalid url", "The directory's URL is ldap://host[:port] or ldaps://host[:port]; %q was given.", l.URL)
	case u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil:
		r.errf(urlRange, "Invalid url", "The directory's URL is a scheme and a host, with an optional port and nothing else (no user, path or query); %q was given.", l.URL)
	}
	if b.StartTLS != nil {
		l.StartTLS = *b.StartTLS
		if l.StartTLS && u != nil && u.Scheme == "ldaps" {
			r.errf(valueRange(b.Body, "start_tls", b.DefRange), "Invalid start_tls",
				"start_tls upgrades a plain ldap:// connection; %q is TLS from the start already.", l.URL)
		}
	}
	if b.InsecureSkipVerify != nil {
		l.InsecureSkipVerify = *b.InsecureSkipVerify
	}
	if b.CAFile != nil {
		rng := valueRange(b.Body, "ca_file", b.DefRange)
		l.CAFile = r.path(*b.CAFile, rng)
		r.checkCAFile(l.CAFile, rng)
	}
	tls := l.StartTLS || (u != nil && u.Scheme == "ldaps")
	if !tls && u != nil && (u.Scheme == "ldap") && !isLoopbackHost(u.Hostname()) {
		r.warnf(urlRange, "Passwords to the directory in clear text",
			"%s is plain LDAP to another machine without start_tls: people's passwords would cross the network in clear text. Use ldaps:// or start_tls = true.", l.URL)
	}
	if (b.CAFile != nil || l.InsecureSkipVerify) && !tls {
		r.errf(b.DefRange, "TLS settings without TLS", "ca_file and insecure_skip_verify apply to ldaps:// or start_tls = true, and %q uses neither.", l.URL)
	}
	if b.BindDN != nil {
		if _, err := ldap.ParseDN(l.BindDN); err != nil || l.BindDN == "" {
			r.errf(valueRange(b.Body, "bind_dn", b.DefRange), "Invalid bind_dn", "%q is not a distinguished name.", l.BindDN)
		}
		if b.BindPasswordFile == nil {
			r.errf(attrRange(b.Body, "bind_dn", b.DefRange), "Missing bind_password_file",
				"bind_dn %q needs its password: bind_password_file names a file that holds it (mode 0600, owned by gpuvm).", l.BindDN)
		}
	}
	if b.BindPasswordFile != nil {
		rng := valueRange(b.Body, "bind_password_file", b.DefRange)
		l.BindPasswordFile = r.path(*b.BindPasswordFile, rng)
		if b.BindDN == nil {
			r.errf(rng, "bind_password_file without bind_dn", "The password is for the service account that bind_dn names; add bind_dn.")
		} else if r.trusted {
			if _, err := os.Stat(l.BindPasswordFile); err != nil {
				r.errf(rng, "Unreadable bind_password_file", "%v.", err)
			}
		}
	}
	for _, d := range []struct {
		name string
		v    string
		p    *string
	}{{"user_base", l.UserBase, b.UserBase}, {"group_base", l.GroupBase, b.GroupBase}} {
		if d.p == nil {
			continue
		}
		if _, err := ldap.ParseDN(d.v); err != nil || d.v == "" {
			r.errf(valueRange(b.Body, d.name, b.DefRange), "Invalid "+d.name, "%q is not a distinguished name.", d.v)
		}
	}
	r.checkFilter(b.Body, "user_filter", l.UserFilter, []string{"{username}"}, b.DefRange)
	if l.GroupBase != "" {
		r.checkFilter(b.Body, "group_filter", l.GroupFilter, []string{"{dn}", "{username}"}, b.DefRange)
	} else if b.GroupFilter != nil || len(b.AdminGroups) > 0 {
		r.errf(b.DefRange, "Missing group_base", "group_filter and admin_groups read groups under group_base; add it.")
	}
	for _, a := range []struct{ name, v string }{{"username_attribute", l.UsernameAttribute}, {"group_attribute", l.GroupAttribute}} {
		if !ldapAttributePattern.MatchString(a.v) {
			r.errf(valueRange(b.Body, a.name, b.DefRange), "Invalid "+a.name, "%q is not an attribute name.", a.v)
		}
	}
	for i, g := range b.AdminGroups {
		if strings.TrimSpace(g) == "" {
			r.errf(listItemRange(b.Body, "admin_groups", i, b.DefRange), "Invalid admin_groups", "A group name may not be empty.")
			continue
		}
		l.AdminGroups = append(l.AdminGroups, g)
	}
	r.checkDuplicates(b.Body, "admin_groups", b.AdminGroups, b.DefRange)
	var ok bool
	l.SyncEvery, ok = r.duration(b.Body, "sync_every", b.SyncEvery, DefaultLDAPSyncEvery, b.DefRange)
	if ok && l.SyncEvery != 0 && l.SyncEvery < minLDAPSyncEvery {
		r.errf(valueRange(b.Body, "sync_every", b.DefRange), "Invalid sync_every",
			"The directory is read at most once a minute (or never, with \"0\"); %s was given.", FormatDuration(l.SyncEvery))
	}
	l.Timeout, ok = r.duration(b.Body, "timeout", b.Timeout, DefaultLDAPTimeout, b.DefRange)
	if ok && (l.Timeout < time.Second || l.Timeout > time.Minute) {
		r.errf(valueRange(b.Body, "timeout", b.DefRange), "Invalid timeout", "timeout is from 1s to 1m; %s was given.", FormatDuration(l.Timeout))
		l.Timeout = DefaultLDAPTimeout
	}
	if l.InsecureSkipVerify {
		r.warnf(valueRange(b.Body, "insecure_skip_verify", b.DefRange), "The directory's certificate is not verified",
			"insecure_skip_verify = true: anyone between gpuvmd and %s can pose as the directory and read people's passwords.", l.URL)
	}
	return l
}

// checkCAFile reads a CA bundle: it must hold at least one PEM certificate.
func (r *resolver) checkCAFile(path string, rng hcl.Range) {
	if !r.trusted {
		return
	}
	data, err := os.ReadFile(path)
	if err != nil {
		r.errf(rng, "Unreadable ca_file", "%v.", err)
		return
	}
	if !x509.NewCertPool().AppendCertsFromPEM(data) {
		r.errf(rng, "Invalid ca_file", "%s holds no PEM certificate.", path)
	}
}

// checkFilter checks that an LDAP filter with its placeholders filled
// compiles, and uses at least one of them.
func (r *resolver) checkFilter(body hcl.Body, name, filter string, placeholders []string, fallback hcl.Range) {
	rng := valueRange(body, name, fallback)
	used, test := false, filter
	for _, p := range placeholders {
		if strings.Contains(test, p) {
			used = true
			test = strings.ReplaceAll(test, p, "x")
		}
	}
	if !used {
		r.errf(rng, "Invalid "+name, "The filter must use %s, which gpuvm replaces with the escaped value; %q does not.", strings.Join(placeholders, " or "), filter)
		return
	}
	if _, err := ldap.CompileFilter(test); err != nil {
		r.errf(rng, "Invalid "+name, "%q is not an LDAP filter: %v.", filter, err)
	}
}

func isLoopbackHost(h string) bool {
	return h == "localhost" || strings.HasPrefix(h, "127.") || h == "::1"
}

// Defaults of the oidc block.
const (
	DefaultOIDCUsernameClaim = "preferred_username"
	DefaultOIDCGroupsClaim   = "groups"
)

// DefaultOIDCScopes are the scopes asked for without a scopes attribute.
var DefaultOIDCScopes = []string{"openid", "profile", "email"}

func (r *resolver) resolveOIDC(b *oidcBlock) *OIDC {
	o := &OIDC{
		Issuer: str(b.Issuer, ""), ClientID: str(b.ClientID, ""), RedirectURL: str(b.RedirectURL, ""), DeviceClientID: str(b.DeviceClientID, ""),
		DisplayName:   str(b.DisplayName, ""),
		UsernameClaim: str(b.UsernameClaim, DefaultOIDCUsernameClaim), GroupsClaim: str(b.GroupsClaim, DefaultOIDCGroupsClaim),
		Scopes: DefaultOIDCScopes, AdminGroups: []string{}, AllowedGroups: []string{},
	}
	if o.DisplayName == "" {
		if u, err := url.Parse(o.Issuer); err == nil && u.Hostname() != "" {
			o.DisplayName = u.Hostname()
		}
	}
	if len(o.DisplayName) > 60 {
		r.errf(valueRange(b.Body, "display_name", b.DefRange), "Invalid display_name", "The provider's name on the sign-in button is at most 60 characters; %d were given.", len(o.DisplayName))
	}
	for _, req := range []struct {
		name string
		p    *string
	}{{"issuer", b.Issuer}, {"client_id", b.ClientID}, {"redirect_url", b.RedirectURL}} {
		if req.p == nil || *req.p == "" {
			r.errf(b.DefRange, "Missing "+req.name, "The oidc block needs %s.", req.name)
		}
	}
	for _, a := range []struct{ name, v string }{{"issuer", o.Issuer}, {"redirect_url", o.RedirectURL}} {
		if a.v == "" {
			continue
		}
		rng := valueRange(b.Body, a.name, b.DefRange)
		u, err := url.Parse(a.v)
		switch {
		case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.RawQuery != "" || u.Fragment != "":
			r.errf(rng, "Invalid "+a.name, "%s is an http(s) URL without query or fragment; %q was given.", a.name, a.v)
		case u.Scheme == "http" && !isLoopbackHost(u.Hostname()):
			r.warnf(rng, "OpenID Connect without TLS", "%s %q is plain http to another machine: codes and tokens would cross the network in clear text.", a.name, a.v)
		}
	}
	if b.ClientSecretFile != nil {
		rng := valueRange(b.Body, "client_secret_file", b.DefRange)
		o.ClientSecretFile = r.path(*b.ClientSecretFile, rng)
		if r.trusted {
			if _, err := os.Stat(o.ClientSecretFile); err != nil {
				r.errf(rng, "Unreadable client_secret_file", "%v.", err)
			}
		}
	}
	if b.Scopes != nil {
		o.Scopes = b.Scopes
		if !slices.Contains(b.Scopes, "openid") {
			r.errf(valueRange(b.Body, "scopes", b.DefRange), "Invalid scopes", "The scopes must include \"openid\".")
		}
		r.checkDuplicates(b.Body, "scopes", b.Scopes, b.DefRange)
	}
	for _, l := range []struct {
		name string
		in   []string
		out  *[]string
	}{{"admin_groups", b.AdminGroups, &o.AdminGroups}, {"allowed_groups", b.AllowedGroups, &o.AllowedGroups}} {
		for i, g := range l.in {
			if strings.TrimSpace(g) == "" {
				r.errf(listItemRange(b.Body, l.name, i, b.DefRange), "Invalid "+l.name, "A group name may not be empty.")
				continue
			}
			*l.out = append(*l.out, g)
		}
		r.checkDuplicates(b.Body, l.name, l.in, b.DefRange)
	}
	return o
}
