package store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestIssueTicketValidation(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		ctx := context.Background()
		mustUser(t, s, "ann")
		vm := mustVM(t, s, "ann", "box")
		tests := []struct {
			name string
			t    ConsoleTicket
			ttl  time.Duration
			want error
		}{
			{"no vm", ConsoleTicket{User: "ann", Kind: TicketConsole}, time.Minute, ErrInvalid},
			{"no user", ConsoleTicket{VMID: vm.ID, Kind: TicketConsole}, time.Minute, ErrInvalid},
			{"no ttl", ConsoleTicket{VMID: vm.ID, User: "ann", Kind: TicketConsole}, 0, ErrInvalid},
			{"bad kind", ConsoleTicket{VMID: vm.ID, User: "ann", Kind: "shell"}, time.Minute, ErrInvalid},
			{"console with a port", ConsoleTicket{VMID: vm.ID, User: "ann", Kind: TicketConsole, Port: 22}, time.Minute, ErrInvalid},
			{"tunnel without a port", ConsoleTicket{VMID: vm.ID, User: "ann", Kind: TicketTunnel}, time.Minute, ErrInvalid},
			{"tunnel port too high", ConsoleTicket{VMID: vm.ID, User: "ann", Kind: TicketTunnel, Port: 65536}, time.Minute, ErrInvalid},
			{"unknown vm", ConsoleTicket{VMID: "nope", User: "ann", Kind: TicketConsole}, time.Minute, ErrNotFound},
			{"bad protocol", ConsoleTicket{VMID: vm.ID, User: "ann", Kind: TicketTunnel, Port: 4172, Protocol: "sctp"}, time.Minute, ErrInvalid},
			{"console over udp", ConsoleTicket{VMID: vm.ID, User: "ann", Kind: TicketConsole, Protocol: ProtocolUDP}, time.Minute, ErrInvalid},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				plain, err := s.IssueTicket(ctx, &tc.t, tc.ttl)
				if !errors.Is(err, tc.want) || plain != "" {
					t.Fatalf("IssueTicket = %q, %v; want %v", plain, err, tc.want)
				}
			})
		}
		if n := count(t, s, "console_tickets"); n != 0 {
			t.Errorf("%d tickets stored by refused calls", n)
		}
	})
}

func TestTicketOneUse(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		mustUser(t, s, "ann")
		vm := mustVM(t, s, "ann", "box")
		tk := &ConsoleTicket{VMID: vm.ID, User: "ann", Kind: TicketTunnel, Port: 3389}
		plain, err := s.IssueTicket(ctx, tk, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(plain, TicketPrefix) || len(plain) < 40 {
			t.Errorf("ticket %q", plain)
		}
		// Only the hash is stored.
		if tk.ID != TicketID(plain) || count(t, s, "console_tickets", "id = ?", plain) != 0 || count(t, s, "console_tickets", "id = ?", tk.ID) != 1 {
			t.Errorf("stored id %q for ticket %q", tk.ID, plain)
		}
		if !tk.ExpiresAt.Equal(tk.CreatedAt.Add(time.Minute)) {
			t.Errorf("created %v, expires %v", tk.CreatedAt, tk.ExpiresAt)
		}
		if _, err := s.PeekTicket(ctx, plain); err != nil {
			t.Fatalf("peek: %v", err)
		}
		got, err := s.ConsumeTicket(ctx, plain)
		if err != nil {
			t.Fatal(err)
		}
		if got.VMID != vm.ID || got.User != "ann" || got.Kind != TicketTunnel || got.Port != 3389 || got.Protocol != ProtocolTCP || got.UsedAt == nil {
			t.Errorf("consumed %+v", got)
		}
		// A UDP ticket keeps its protocol.
		udp, err := s.IssueTicket(ctx, &ConsoleTicket{VMID: vm.ID, User: "ann", Kind: TicketTunnel, Port: 47998, Protocol: ProtocolUDP}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := s.ConsumeTicket(ctx, udp); err != nil || got.Protocol != ProtocolUDP || got.Port != 47998 {
			t.Errorf("UDP ticket: %+v, %v", got, err)
		}
		for _, f := range []func(context.Context, string) (*ConsoleTicket, error){s.ConsumeTicket, s.PeekTicket} {
			if _, err := f(ctx, plain); !errors.Is(err, ErrTicketUsed) || !errors.Is(err, ErrInvalidTicket) || !strings.Contains(err.Error(), "already used") {
				t.Errorf("second use: %v", err)
			}
		}
		for _, bad := range []string{"", "nope", TicketPrefix + "nope", plain + "x"} {
			if _, err := s.ConsumeTicket(ctx, bad); !errors.Is(err, ErrTicketUnknown) {
				t.Errorf("ticket %q: %v", bad, err)
			}
			if _, err := s.PeekTicket(ctx, bad); !errors.Is(err, ErrTicketUnknown) {
				t.Errorf("peek %q: %v", bad, err)
			}
		}

		// Expiry: valid until its time, refused after, and not spent by
		// the refusal.
		late, err := s.IssueTicket(ctx, &ConsoleTicket{VMID: vm.ID, User: "ann", Kind: TicketConsole}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		d.clock.Advance(time.Minute)
		for _, f := range []func(context.Context, string) (*ConsoleTicket, error){s.PeekTicket, s.ConsumeTicket, s.ConsumeTicket} {
			if _, err := f(ctx, late); !errors.Is(err, ErrTicketExpired) || !strings.Contains(err.Error(), "expired") {
				t.Errorf("expired ticket: %v", err)
			}
		}
		if n := count(t, s, "console_tickets", "used_at IS NOT NULL"); n != 2 {
			t.Errorf("%d tickets marked used, want 2", n)
		}

		// The expired ones go; a fresh one stays.
		fresh, err := s.IssueTicket(ctx, &ConsoleTicket{VMID: vm.ID, User: "ann", Kind: TicketConsole}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		n, err := s.DeleteExpiredTickets(ctx, s.Now())
		if err != nil || n != 3 {
			t.Fatalf("DeleteExpiredTickets = %d, %v; want 3", n, err)
		}
		if _, err := s.ConsumeTicket(ctx, fresh); err != nil {
			t.Errorf("fresh ticket after the cleanup: %v", err)
		}
	})
}

// TestTicketConcurrentUse: of many simultaneous uses of one ticket, exactly
// one wins.
func TestTicketConcurrentUse(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		ctx := context.Background()
		mustUser(t, s, "ann")
		vm := mustVM(t, s, "ann", "box")
		plain, err := s.IssueTicket(ctx, &ConsoleTicket{VMID: vm.ID, User: "ann", Kind: TicketConsole}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		const n = 8
		var wg sync.WaitGroup
		var mu sync.Mutex
		wins, used := 0, 0
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := s.ConsumeTicket(ctx, plain)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					wins++
				case errors.Is(err, ErrTicketUsed):
					used++
				default:
					t.Errorf("concurrent use: %v", err)
				}
			}()
		}
		wg.Wait()
		if wins != 1 || used != n-1 {
			t.Errorf("%d wins and %d refusals, want 1 and %d", wins, used, n-1)
		}
	})
}

// TestTicketsGoWithTheVM: a VM's tickets are removed with its row.
func TestTicketsGoWithTheVM(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		ctx := context.Background()
		mustUser(t, s, "ann")
		vm := mustVM(t, s, "ann", "box")
		plain, err := s.IssueTicket(ctx, &ConsoleTicket{VMID: vm.ID, User: "ann", Kind: TicketConsole}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		// Its operations go by cascade too; it has no allocation yet.
		if err := s.db.Exec("DELETE FROM vms WHERE id = ?", vm.ID).Error; err != nil {
			t.Fatalf("remove the VM row: %v", err)
		}
		if _, err := s.ConsumeTicket(ctx, plain); !errors.Is(err, ErrTicketUnknown) {
			t.Errorf("ticket of a removed VM: %v", err)
		}
	})
}
