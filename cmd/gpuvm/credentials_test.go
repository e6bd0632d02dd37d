package main

import (
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client/clienttest"
)

func TestCredentials(t *testing.T) {
	env := clienttest.New(t, clienttest.Options{Profiles: clienttest.Profiles + `
template "pw" {
  content = "#cloud-config\npassword: ${password_hash}\n"
}
profile "desk" {
  vcpus  = 1
  memory = "1GiB"
  boot { kernel = "/k" }
  cloud_init { template = "pw" }
}
`})
	admin := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.AdminToken})
	ann := newCLI(t, map[string]string{"GPUVM_URL": env.URL, "GPUVM_TOKEN": env.UserToken})
	ann.must("create", "desk", "--name", "box", "--hours", "1")
	// A seat's guest uses no password: there is none, and it says what
	// reaches the VM instead.
	ann.must("create", "seat", "--name", "plain", "--hours", "1")
	if out, errOut, code := ann.run("credentials", "plain"); code != 1 || out != "" || !strings.Contains(errOut, "has no desktop password") ||
		!strings.Contains(errOut, "gpuvm ssh plain") {
		t.Errorf("credentials of a seat: exit %d\n%s%s", code, out, errOut)
	}

	if out, errOut, code := admin.run("credentials", "box"); code != 1 || out != "" {
		t.Errorf("an admin (not the owner): exit %d\n%s%s", code, out, errOut)
	}
	var cr api.CredentialsResponse
	decodeStrict(t, ann.must("credentials", "box", "--json"), &cr)
	if cr.User != "ann" || len(cr.Password) != 20 || cr.VMID == "" {
		t.Fatalf("--json: %+v", cr)
	}
	out, errOut, code := ann.run("credentials", "box")
	if code != 1 || !strings.Contains(errOut, "already read") || strings.Contains(out+errOut, cr.Password) {
		t.Errorf("second read: exit %d\n%s%s", code, out, errOut)
	}
	if _, _, code := ann.run("credentials"); code != 2 {
		t.Errorf("no VM: exit %d, want 2", code)
	}
}
