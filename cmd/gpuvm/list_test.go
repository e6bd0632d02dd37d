package main

import (
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
)

// TestListOwnerColumn: gpuvm list shows OWNER whenever a VM listed is not
// the caller's — an admin's list of one other person's VM too — and not
// for a person's own VMs.
func TestListOwnerColumn(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{})
	admin := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.AdminToken})
	ann := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
	ann.must("create", "seat", "--name", "box", "--hours", "1")

	out := admin.must("list")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "OWNER") || !strings.HasPrefix(lines[1], "ann ") || !strings.Contains(lines[1], "box") {
		t.Errorf("an admin's list of ann's VM:\n%s", out)
	}
	if out := ann.must("list"); strings.Contains(out, "OWNER") || !strings.HasPrefix(out, "NAME") {
		t.Errorf("ann's own list:\n%s", out)
	}
	admin.must("create", "seat", "--name", "mine", "--hours", "1")
	out = admin.must("list")
	if !strings.HasPrefix(out, "OWNER") || !strings.Contains(out, "admin ") || !strings.Contains(out, "ann ") {
		t.Errorf("an admin's list of two owners:\n%s", out)
	}
}
