package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/store/storetest"
)

// join-installation makes an empty database part of another installation;
// a database with VMs, a bad ID and a missing argument are refused and
// change nothing.
func TestJoinInstallation(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "gpuvm.db")
	ctx := context.Background()
	st := storetest.Open(t, store.Config{DSN: db})
	before, _ := st.Installation(ctx)
	st.Close()
	const id = "0f6f1a52-9a40-4c3e-8d7e-2b1f3c4d5e6f"
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"join-installation", "--state-dir", dir}, "give the installation ID"},
		{[]string{"join-installation", "--state-dir", dir, "not-a-uuid"}, "not a UUID"},
	} {
		if out, err := gpuvmd(t, tc.args...); err == nil || !strings.Contains(out+err.Error(), tc.want) {
			t.Errorf("%v: %v\n%s", tc.args, err, out)
		}
	}
	out, err := gpuvmd(t, "join-installation", "--state-dir", dir, id)
	if err != nil || !strings.Contains(out, "now installation "+id) || !strings.Contains(out, before.ID) {
		t.Fatalf("join: %v\n%s", err, out)
	}
	st = storetest.Open(t, store.Config{DSN: db})
	defer st.Close()
	if got, _ := st.Installation(ctx); got.ID != id {
		t.Fatalf("installation %s after the join, want %s", got.ID, id)
	}
	if err := st.CreateUser(ctx, &store.User{Name: "ann"}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateVM(ctx, &store.VM{Name: "v", Owner: "ann", Profile: "p"}, store.CreateVMOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := gpuvmd(t, "join-installation", "--state-dir", dir, before.ID); err == nil || !strings.Contains(out+err.Error(), "holds 1 VMs") {
		t.Errorf("join with a VM: %v\n%s", err, out)
	}
	if got, _ := st.Installation(ctx); got.ID != id {
		t.Errorf("the refused join changed the installation to %s", got.ID)
	}
}
