package domain

import (
	"errors"
	"strings"
	"testing"
)

func TestTaskChannel(t *testing.T) {
	s := validSpec()
	s.TaskChannel = true
	x, err := XML(s)
	if err != nil {
		t.Fatal(err)
	}
	want := `<channel type="unix"><source mode="bind"></source><target type="virtio" name="org.gpuvm.task.0"></target></channel>`
	if !strings.Contains(strings.Join(strings.Fields(x), ""), strings.Join(strings.Fields(want), "")) {
		t.Fatalf("no task channel in\n%s", x)
	}
	// Before start: no path; the live XML has the one libvirt chose.
	if _, err := TaskChannelPath(x); !errors.Is(err, ErrNoTaskChannel) {
		t.Fatalf("path of an unstarted domain = %v, want ErrNoTaskChannel", err)
	}
	live := strings.Replace(x, `<source mode="bind">`, `<source mode="bind" path="/run/libvirt/qemu/channel/1-vm/org.gpuvm.task.0">`, 1)
	if p, err := TaskChannelPath(live); err != nil || p != "/run/libvirt/qemu/channel/1-vm/org.gpuvm.task.0" {
		t.Fatalf("live path = %q, %v", p, err)
	}
	s.TaskChannel = false
	x, _ = XML(s)
	if _, err := TaskChannelPath(x); !errors.Is(err, ErrNoTaskChannel) || strings.Contains(x, TaskChannelName) {
		t.Fatalf("a domain without the channel: %v", err)
	}
}
