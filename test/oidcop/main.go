// Command oidcop is a small OpenID provider for gpuvm's OIDC tests, run as
// its own process (go tool oidcop, or a binary the test builds): zitadel/oidc's
// op package with its example's in-memory storage, authorization code with
// PKCE, the device flow, discovery and JWKS, and a "groups" claim from a
// users file. It prints "issuer URL" on its first line once it listens.
//
//	oidcop -users users.json -client gpuvm:secret:http://127.0.0.1:8080/v1/auth/oidc/callback
//
// users.json maps a username to {"password": "…", "groups": ["…"]}. With
// -no-device it is a provider without the device authorization grant: its
// discovery document names no device_authorization_endpoint, which answers
// 404.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"

	"github.com/zitadel/oidc/v3/example/server/exampleop"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
)

type user struct {
	Password string   `json:"password"`
	Groups   []string `json:"groups"`
}

// users is the example's UserStore over the users file.
type users struct{ byName map[string]*storage.User }

func (u users) GetUserByID(id string) *storage.User         { return u.byName[id] }
func (u users) GetUserByUsername(name string) *storage.User { return u.byName[name] }
func (u users) ExampleClientID() string                     { return "service" }

// groupStorage adds the "groups" claim to ID tokens and userinfo.
type groupStorage struct {
	*storage.Storage
	groups map[string][]string
}

func (g groupStorage) SetUserinfoFromRequest(ctx context.Context, ui *oidc.UserInfo, token op.IDTokenRequest, scopes []string) error {
	if err := g.Storage.SetUserinfoFromRequest(ctx, ui, token, scopes); err != nil {
		return err
	}
	ui.AppendClaims("groups", g.groups[token.GetSubject()])
	return nil
}

func (g groupStorage) SetUserinfoFromToken(ctx context.Context, ui *oidc.UserInfo, tokenID, subject, origin string) error {
	if err := g.Storage.SetUserinfoFromToken(ctx, ui, tokenID, subject, origin); err != nil {
		return err
	}
	ui.AppendClaims("groups", g.groups[ui.Subject])
	return nil
}

func main() {
	usersFile := flag.String("users", "", "JSON file: username → {password, groups}")
	client := flag.String("client", "", "a web client: ID:SECRET:REDIRECT_URI")
	addr := flag.String("listen", "127.0.0.1:0", "address to listen on")
	noDevice := flag.Bool("no-device", false, "offer no device authorization grant")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := run(*usersFile, *client, *addr, *noDevice, log); err != nil {
		fmt.Fprintln(os.Stderr, "oidcop:", err)
		os.Exit(1)
	}
}

func run(usersFile, client, addr string, noDevice bool, log *slog.Logger) error {
	data, err := os.ReadFile(usersFile)
	if err != nil {
		return err
	}
	var in map[string]user
	if err := json.Unmarshal(data, &in); err != nil {
		return fmt.Errorf("%s: %w", usersFile, err)
	}
	us := users{byName: map[string]*storage.User{}}
	groups := map[string][]string{}
	for name, u := range in {
		us.byName[name] = &storage.User{ID: name, Username: name, Password: u.Password, Email: name + "@example.org", EmailVerified: true}
		groups[name] = u.Groups
	}
	parts := strings.SplitN(client, ":", 3)
	if len(parts) != 3 {
		return fmt.Errorf("-client %q is not ID:SECRET:REDIRECT_URI", client)
	}
	id, secret, redirect := parts[0], parts[1], parts[2]
	storage.RegisterClients(storage.WebClient(id, secret, redirect), storage.NativeClient(id+"-cli", "http://127.0.0.1/callback"), storage.DeviceClient(id+"-device", secret))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	issuer := "http://" + ln.Addr().String() + "/"
	var router http.Handler = exampleop.SetupServer(issuer, groupStorage{Storage: storage.NewStorage(us), groups: groups}, log, false)
	if noDevice {
		router = withoutDevice(router)
	}
	fmt.Println("issuer", issuer)
	return http.Serve(ln, router)
}

// withoutDevice hides the device authorization grant of next: the
// discovery document loses device_authorization_endpoint, which answers
// 404, and the grant type.
func withoutDevice(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/device_authorization": // zitadel/oidc's op's default
			http.NotFound(w, r)
			return
		case "/.well-known/openid-configuration":
		default:
			next.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		next.ServeHTTP(rec, r)
		var doc map[string]any
		if err := json.Unmarshal(rec.Body.Bytes(), &doc); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		delete(doc, "device_authorization_endpoint")
		if gts, ok := doc["grant_types_supported"].([]any); ok {
			kept := gts[:0]
			for _, g := range gts {
				if g != "urn:ietf:params:oauth:grant-type:device_code" {
					kept = append(kept, g)
				}
			}
			doc["grant_types_supported"] = kept
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(doc)
	})
}
