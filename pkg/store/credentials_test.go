package store

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
)

func TestVMCredentialOnce(t *testing.T) {
	eachDriver(t, func(t *testing.T, s *Store, d *testDB) {
		ctx := context.Background()
		mustUser(t, s, "ann")
		vm := &VM{Name: "desk", Owner: "ann", Profile: "desktop", Hours: 1}
		cr := &VMCredential{Login: "ann", Password: "s3cret-pw", PasswordHash: "$6$saltsalt$hash"}
		if _, err := s.CreateVM(ctx, vm, CreateVMOptions{RequestedBy: "ann", Credential: cr}); err != nil {
			t.Fatal(err)
		}
		if cr.VMID != vm.ID {
			t.Fatalf("credential of vm %q, want %q", cr.VMID, vm.ID)
		}
		// The seed's view: login and hash, never the password.
		got, err := s.GetVMCredential(ctx, vm.ID)
		if err != nil || got.Login != "ann" || got.PasswordHash != "$6$saltsalt$hash" || got.Password != "" || got.ReadAt != nil {
			t.Fatalf("GetVMCredential = %+v, %v", got, err)
		}
		// Two readers at once: exactly one gets the password.
		var wg sync.WaitGroup
		var mu sync.Mutex
		var won, lost int
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := s.TakeVMCredential(ctx, vm.ID, "ann")
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && c.Password == "s3cret-pw" && c.ReadAt != nil && c.ReadBy == "ann":
					won++
				case errors.Is(err, ErrCredentialRead) && errors.Is(err, ErrConflict):
					lost++
				default:
					t.Errorf("TakeVMCredential = %+v, %v", c, err)
				}
			}()
		}
		wg.Wait()
		if won != 1 || lost != 3 {
			t.Fatalf("%d reads got the password, %d were refused; want 1 and 3", won, lost)
		}
		_, err = s.TakeVMCredential(ctx, vm.ID, "ann")
		var read *CredentialReadError
		if !errors.As(err, &read) || read.ReadAt.IsZero() || !strings.Contains(err.Error(), "already read") {
			t.Fatalf("second read: %v", err)
		}
		// The password is gone from the database; the hash stays for a re-create.
		if n := count(t, s, "vm_credentials", "password <> ''"); n != 0 {
			t.Errorf("%d passwords still stored after the read", n)
		}
		if got, err := s.GetVMCredential(ctx, vm.ID); err != nil || got.PasswordHash == "" || got.ReadAt == nil || got.ReadBy != "ann" {
			t.Errorf("after the read: %+v, %v", got, err)
		}
		if _, err := s.TakeVMCredential(ctx, "no-such-vm", "ann"); !errors.Is(err, ErrNotFound) {
			t.Errorf("unknown vm: %v", err)
		}
		// Deleting a VM forgets a password nobody read.
		gone := &VM{Name: "gone", Owner: "ann", Profile: "desktop", Hours: 1}
		if _, err := s.CreateVM(ctx, gone, CreateVMOptions{RequestedBy: "ann", Credential: &VMCredential{Login: "ann", Password: "unread", PasswordHash: "$6$saltsalt$hash"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.UpdateVMState(ctx, gone.ID, gone.Version, VMUpdate{State: VMDeleted}); err != nil {
			t.Fatal(err)
		}
		if n := count(t, s, "vm_credentials", "vm_id = ? AND password = ''", gone.ID); n != 1 {
			t.Errorf("the deleted VM's unread password is still stored")
		}
		// A VM made without one has none.
		other := mustVM(t, s, "ann", "plain")
		if _, err := s.GetVMCredential(ctx, other.ID); !errors.Is(err, ErrNotFound) {
			t.Errorf("vm without a credential: %v", err)
		}
	})
}
