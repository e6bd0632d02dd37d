package orchestrator

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
)

// A VM whose profile promises a desktop served in the guest (RDP, Sunshine,
// DCV) is ready when that server answers, not only when the guest has an
// address: cloud-init may still be installing or starting it, and "ready"
// is what people take as "open the desktop now". Its booting VM says what
// it waits for; a server that does not answer within desktopWaitFactor
// BootTimeouts of the boot leaves the VM ready with a reason that says so.

// desktopWaitFactor: the desktop server is waited for up to this many
// BootTimeouts from the start of the boot (15 minutes by default), time
// for cloud-init to install and start it under software emulation.
const desktopWaitFactor = 3

// desktopDialTimeout bounds one look at the desktop server's port.
const desktopDialTimeout = 2 * time.Second

// guestDesktop is the TCP port and the words of the desktop server a
// profile promises in the guest; false when it promises none.
func guestDesktop(p *config.Profile) (port int, what string, ok bool) {
	if p == nil || !p.Desktop.Declared || !p.Desktop.Tunneled() {
		return 0, "", false
	}
	for _, dp := range p.Desktop.Ports() {
		if dp.Transport == "tcp" && dp.Port > 0 {
			return dp.Port, fmt.Sprintf("%s, port %d", desktopWords[p.Desktop.Protocol], dp.Port), true
		}
	}
	return 0, "", false
}

var desktopWords = map[string]string{
	config.DesktopRDP:      "RDP",
	config.DesktopSunshine: "Sunshine",
	config.DesktopDCV:      "DCV",
}

// WaitingDesktopReason is the reason of a booting VM whose guest is up
// and whose desktop server does not answer yet.
func WaitingDesktopReason(what string) string {
	return "the guest is up; its desktop (" + what + ") does not answer yet: cloud-init may still be setting it up"
}

// DesktopTimeoutReason is the reason of a VM made ready although its
// desktop server did not answer within d of its boot.
func DesktopTimeoutReason(what string, d time.Duration) string {
	return "the guest is up but its desktop (" + what + ") did not answer within " + shortDuration(d) +
		" of the boot: it may be failing in the guest (look with gpuvm ssh or the console)"
}

// desktopReady looks whether the desktop server a VM's profile promises
// answers on one of the guest's addresses. wait reports that the VM stays
// booting (reason: what it waits for); else reason is "" (it answers, or
// there is none to wait for) or why the VM is ready without it.
func (lc *lifecycle) desktopReady(ctx context.Context, p *config.Profile, addrs []hypervisor.Address, since time.Time) (wait bool, reason string) {
	port, what, ok := guestDesktop(p)
	if !ok {
		return false, ""
	}
	dial := lc.dial
	if dial == nil {
		d := &net.Dialer{}
		dial = d.DialContext
	}
	for _, a := range addrs {
		if !a.IP.IsValid() || a.IP.IsLinkLocalUnicast() || a.IP.IsLoopback() {
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, desktopDialTimeout)
		c, err := dial(dctx, "tcp", net.JoinHostPort(a.IP.String(), strconv.Itoa(port)))
		cancel()
		if err == nil {
			c.Close()
			return false, ""
		}
	}
	limit := desktopWaitFactor * lc.settings().BootTimeout
	if lc.st.Now().Sub(since) >= limit {
		return false, DesktopTimeoutReason(what, limit)
	}
	return true, WaitingDesktopReason(what)
}
