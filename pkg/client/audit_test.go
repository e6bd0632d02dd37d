package client_test

import (
	"context"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
)

func TestAudit(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ann, _ := client.New(env.URL, env.UserToken)
	admin, _ := client.New(env.URL, env.AdminToken)
	start := time.Now().Add(-time.Minute)

	created, err := ann.CreateVM(ctx, api.CreateVMRequest{Profile: "seat", Name: "box", Hours: 1}, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ann.CreateVM(ctx, api.CreateVMRequest{Profile: "nope"}, ""); err == nil {
		t.Fatal("unknown profile accepted")
	}
	if _, err := admin.CreateUser(ctx, api.CreateUserRequest{Name: "carl"}); err != nil {
		t.Fatal(err)
	}

	all, err := admin.ListAudit(ctx, client.ListAuditOptions{})
	if err != nil || len(all.Items) != 3 || all.Next != "" {
		t.Fatalf("%v %+v", err, all)
	}
	if e := all.Items[2]; e.Action != "vm.create" || e.User != "ann" || e.TokenID == 0 || e.VMID != created.VM.ID ||
		e.Target != "vm/ann/box" || e.Outcome != api.AuditOK || e.Status != 202 || e.RequestID == "" || e.Time.Before(start) {
		t.Errorf("create entry %+v", e)
	}
	if e := all.Items[1]; e.Outcome != api.AuditRefused || e.Detail == "" {
		t.Errorf("refused entry %+v", e)
	}
	for _, tc := range []struct {
		name string
		c    *client.Client
		own  bool
		o    client.ListAuditOptions
		want int
	}{
		{"admin: a user", admin, false, client.ListAuditOptions{User: "admin"}, 1},
		{"admin: an action", admin, false, client.ListAuditOptions{Action: "vm.create"}, 2},
		{"admin: a kind", admin, false, client.ListAuditOptions{Action: "user."}, 1},
		{"admin: a VM by ID", admin, false, client.ListAuditOptions{VM: created.VM.ID}, 1},
		{"admin: a range", admin, false, client.ListAuditOptions{From: start, To: time.Now().Add(time.Minute)}, 3},
		{"admin: before it all", admin, false, client.ListAuditOptions{To: start}, 0},
		{"user: own", ann, true, client.ListAuditOptions{}, 2},
		{"user: own VM by name", ann, true, client.ListAuditOptions{VM: "box"}, 1},
		{"admin: own", admin, true, client.ListAuditOptions{}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			list := tc.c.ListAudit
			if tc.own {
				list = tc.c.ListOwnAudit
			}
			l, err := list(ctx, tc.o)
			if err != nil || len(l.Items) != tc.want {
				t.Errorf("%v: %+v, want %d entries", err, l, tc.want)
			}
		})
	}
	page, err := admin.ListAudit(ctx, client.ListAuditOptions{Limit: 2})
	if err != nil || len(page.Items) != 2 || page.Next == "" {
		t.Fatalf("%v %+v", err, page)
	}
	rest, err := admin.ListAudit(ctx, client.ListAuditOptions{Limit: 2, After: page.Next})
	if err != nil || len(rest.Items) != 1 || rest.Next != "" || rest.Items[0].ID != all.Items[2].ID {
		t.Errorf("second page: %v %+v", err, rest)
	}
	if _, err := ann.ListAudit(ctx, client.ListAuditOptions{}); !client.IsForbidden(err) {
		t.Errorf("a user on the admin log: %v", err)
	}
	if _, err := ann.ListOwnAudit(ctx, client.ListAuditOptions{User: "admin"}); !client.IsForbidden(err) {
		t.Errorf("a user asking for another's entries: %v", err)
	}
	_, err = admin.ListAudit(ctx, client.ListAuditOptions{Action: "vm.fly"})
	if p, ok := client.AsProblem(err); !ok || p.Status != 400 || p.Field != "action" {
		t.Errorf("unknown action: %v", err)
	}
}
