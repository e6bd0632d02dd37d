package e2e

import (
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// recordSerial copies what the running domain dom writes on its serial
// console (the pty `virsh ttyconsole` names) into path, from now until the
// test ends, and returns path; nothing is recorded (and it says so in the
// test's log) when the pty cannot be opened. QEMU drops what nobody reads
// on the pty: call it as soon as the domain runs. The guest's boot (its
// kernel, systemd, the DHCP client on console=ttyS0) is then there to read
// when a guest never reports in, which the address alone cannot say.
func recordSerial(t *testing.T, dom, path string) string {
	t.Helper()
	out, err := exec.Command("virsh", "-c", systemURI, "ttyconsole", dom).Output()
	pty := strings.TrimSpace(string(out))
	if err != nil || pty == "" {
		t.Logf("no serial console of %s to record: %v", dom, err)
		return ""
	}
	in, err := os.OpenFile(pty, os.O_RDONLY|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Logf("serial console of %s: %v", dom, err)
		return ""
	}
	f, err := os.Create(path)
	if err != nil {
		in.Close()
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(f, in) // ends when in is closed or the domain goes
	}()
	t.Cleanup(func() {
		in.Close()
		<-done
		f.Close()
	})
	return path
}

// lastLines is the last n lines of the file at path ("" when it cannot
// be read), for a failure's message.
func lastLines(path string, n int) string {
	if path == "" {
		return ""
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(strings.ReplaceAll(string(b), "\r", ""), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
