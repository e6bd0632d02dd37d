package client_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// The admin calls against the real API: users, tokens, hosts, drains.
func TestAdminAgainstServer(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, _ := client.New(env.URL, env.AdminToken)
	ann, _ := client.New(env.URL, env.UserToken)

	if me, err := ann.Whoami(ctx); err != nil || me.Name != "ann" || me.Admin {
		t.Fatalf("whoami: %v %+v", err, me)
	}
	if me, err := admin.Whoami(ctx); err != nil || me.Name != "admin" || !me.Admin {
		t.Fatalf("whoami admin: %v %+v", err, me)
	}

	// Users.
	u, err := admin.CreateUser(ctx, api.CreateUserRequest{Name: "bob", Groups: []string{"render"}})
	if err != nil || u.Name != "bob" || len(u.Groups) != 1 || u.Groups[0] != "render" {
		t.Fatalf("create user: %v %+v", err, u)
	}
	if _, err := admin.CreateUser(ctx, api.CreateUserRequest{Name: "bob"}); !client.IsConflict(err) {
		t.Errorf("same name: %v", err)
	}
	if _, err := admin.CreateUser(ctx, api.CreateUserRequest{Name: "Bob"}); !client.IsValidation(err) {
		t.Errorf("bad name: %v", err)
	}
	if _, err := ann.CreateUser(ctx, api.CreateUserRequest{Name: "eve"}); !client.IsForbidden(err) {
		t.Errorf("user creates a user: %v", err)
	}
	us, err := admin.ListUsers(ctx)
	if err != nil || len(us) != 3 || us[0].Name != "admin" || us[1].Name != "ann" || us[2].Name != "bob" {
		t.Errorf("list users: %v %+v", err, us)
	}
	if _, err := ann.ListUsers(ctx); !client.IsForbidden(err) {
		t.Errorf("user lists users: %v", err)
	}
	if got, err := ann.GetUser(ctx, "ann"); err != nil || got.Name != "ann" {
		t.Errorf("get self: %v %+v", err, got)
	}
	if _, err := ann.GetUser(ctx, "bob"); !client.IsNotFound(err) {
		t.Errorf("get another: %v", err)
	}

	// Tokens: Bob's, made by the admin, works until revoked.
	tok, err := admin.CreateToken(ctx, "bob", api.CreateTokenRequest{Name: "laptop", ExpiresInHours: 24})
	if err != nil || tok.Secret == "" || tok.ExpiresAt == nil || tok.User != "bob" {
		t.Fatalf("create token: %v %+v", err, tok)
	}
	bob, _ := client.New(env.URL, tok.Secret)
	if me, err := bob.Whoami(ctx); err != nil || me.Name != "bob" || me.Groups[0] != "render" {
		t.Fatalf("bob's token: %v %+v", err, me)
	}
	ts, err := bob.ListTokens(ctx, "bob")
	if err != nil || len(ts) != 1 || ts[0].ID != tok.ID || ts[0].State != api.TokenActive {
		t.Errorf("bob's tokens: %v %+v", err, ts)
	}
	if _, err := ann.ListTokens(ctx, "bob"); !client.IsNotFound(err) {
		t.Errorf("ann lists bob's tokens: %v", err)
	}
	if _, err := ann.CreateToken(ctx, "ann", api.CreateTokenRequest{Name: "test"}); !client.IsConflict(err) {
		t.Errorf("a live token's name again: %v", err)
	}
	if err := ann.RevokeToken(ctx, "bob", tok.ID); !client.IsNotFound(err) {
		t.Errorf("ann revokes bob's token: %v", err)
	}
	if err := bob.RevokeToken(ctx, "bob", tok.ID); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	if _, err := bob.Whoami(ctx); !client.IsUnauthenticated(err) {
		t.Errorf("revoked token: %v", err)
	}
	if ts, err := admin.ListTokens(ctx, "bob"); err != nil || len(ts) != 1 || ts[0].State != api.TokenRevoked {
		t.Errorf("after revoke: %v %+v", err, ts)
	}

	// Drains.
	st, err := admin.DrainGPU(ctx, "41:00.0", "fan")
	if err != nil || st.Address != "0000:41:00.0" || st.Drained == nil || st.Drained.Reason != "fan" || st.Drained.By != "admin" {
		t.Fatalf("drain: %v %+v", err, st)
	}
	if _, err := ann.DrainGPU(ctx, "0000:41:00.0", ""); !client.IsForbidden(err) {
		t.Errorf("user drains: %v", err)
	}
	if _, err := admin.DrainGPU(ctx, "0000:99:00.0", ""); !client.IsNotFound(err) {
		t.Errorf("unknown GPU: %v", err)
	}
	hi, err := admin.GPUs(ctx)
	if err != nil || len(hi.GPUs) != 1 || hi.GPUs[0].Drained == nil || hi.GPUs[0].Drained.Reason != "fan" {
		t.Fatalf("gpus: %v %+v", err, hi)
	}
	if st, err := admin.UndrainGPU(ctx, "0000:41:00.0"); err != nil || st.Drained != nil {
		t.Errorf("undrain: %v %+v", err, st)
	}
	if _, err := admin.UndrainGPU(ctx, "0000:41:00.0"); !client.IsNotFound(err) {
		t.Errorf("undrain twice: %v", err)
	}

	// Hosts.
	inv, _ := json.Marshal(api.HostInventory{GPUs: []api.GPU{{Address: "0000:41:00.0", Model: "H100 PCIe 80GB", DeviceID: "10de:2331", Mode: "idle", Backends: map[string]string{"mig": ""}}}})
	if err := env.Store.RegisterHost(ctx, &store.Host{Name: "gpu-a", APIURL: "http://gpu-a:8080", Version: "v1", Inventory: string(inv)}); err != nil {
		t.Fatal(err)
	}
	hs, err := ann.ListHosts(ctx)
	if err != nil || len(hs) != 1 || hs[0].Name != "gpu-a" || hs[0].State != "up" || hs[0].GPUs != 1 || hs[0].Free.IdleGPUs != 1 || hs[0].APIURL != "" {
		t.Errorf("hosts as a user: %v %+v", err, hs)
	}
	if hs, err := admin.ListHosts(ctx); err != nil || len(hs) != 1 || hs[0].APIURL != "http://gpu-a:8080" {
		t.Errorf("hosts as an admin: %v %+v", err, hs)
	}
}
