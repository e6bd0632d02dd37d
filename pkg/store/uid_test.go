package store

import (
	"context"
	"errors"
	"slices"
	"testing"
)

func TestUserUID(t *testing.T) {
	ctx := context.Background()
	eachDriver(t, func(t *testing.T, s *Store, _ *testDB) {
		for _, n := range []string{"ann", "bob", "cem", "dee"} {
			mustUser(t, s, n)
		}
		uid := func(name string) int64 {
			t.Helper()
			u, err := s.UserUID(ctx, name, 20000, 20002)
			if err != nil {
				t.Fatalf("uid of %s: %v", name, err)
			}
			return u
		}
		if a, b := uid("ann"), uid("bob"); a != 20000 || b != 20001 {
			t.Fatalf("uids %d, %d; want 20000, 20001", a, b)
		}
		if a := uid("ann"); a != 20000 {
			t.Fatalf("ann's uid changed to %d", a)
		}
		// The directory's uidNumber is taken as it is, and frees the
		// assigned one; one that another user holds is not.
		u, err := s.SignInDirectoryUser(ctx, DirectoryUser{Name: "eve", Source: SourceLDAP, UID: 20001})
		if err != nil || u.UID != nil {
			t.Fatalf("eve with bob's uid: %+v, %v; want no uid", u, err)
		}
		u, err = s.SignInDirectoryUser(ctx, DirectoryUser{Name: "eve", Source: SourceLDAP, UID: 5001})
		if err != nil || u.UID == nil || *u.UID != 5001 {
			t.Fatalf("eve: %+v, %v; want uid 5001", u, err)
		}
		if e := uid("eve"); e != 5001 {
			t.Fatalf("eve's uid %d, want the directory's 5001", e)
		}
		if c := uid("cem"); c != 20002 {
			t.Fatalf("cem's uid %d, want 20002", c)
		}
		if _, err := s.UserUID(ctx, "dee", 20000, 20002); !errors.Is(err, ErrNoFreeUID) {
			t.Fatalf("dee in a full range: %v, want ErrNoFreeUID", err)
		}
		if _, err := s.UserUID(ctx, "nobody", 20000, 20002); !errors.Is(err, ErrNotFound) {
			t.Fatalf("unknown user: %v, want ErrNotFound", err)
		}
		if _, err := s.UserUID(ctx, "dee", 0, 10); !errors.Is(err, ErrInvalid) {
			t.Fatalf("range from 0: %v, want ErrInvalid", err)
		}
		// A gap is filled first.
		if err := s.db.Model(&User{}).Where("name = ?", "ann").Update("uid", nil).Error; err != nil {
			t.Fatal(err)
		}
		if d := uid("dee"); d != 20000 {
			t.Fatalf("dee's uid %d, want the freed 20000", d)
		}
	})
}

// A database of the version before user_uid migrates: its users are
// kept, with no uid until one is needed.
func TestMigrateUserUID(t *testing.T) {
	for _, driver := range drivers {
		t.Run(driver, func(t *testing.T) {
			ctx := context.Background()
			d := newTestDB(t, driver)
			all := migrations
			before := slices.IndexFunc(all, func(m migration) bool { return m.Name == "user_uid" })
			migrations = all[:before]
			old, err := Open(ctx, d.config())
			migrations = all
			if err != nil {
				t.Fatal(err)
			}
			q := "INSERT INTO users (name, admin, created_at, updated_at, source, ssh_keys) VALUES ('old', FALSE, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP, 'local', '')"
			if err := old.db.Exec(q).Error; err != nil {
				t.Fatal(err)
			}
			_ = old.Close()
			s := d.open(t)
			if v, err := s.CurrentSchemaVersion(ctx); err != nil || v != SchemaVersion() {
				t.Fatalf("version %d, %v; want %d", v, err, SchemaVersion())
			}
			u, err := s.GetUser(ctx, "old")
			if err != nil || u.UID != nil {
				t.Fatalf("old user after the migration: %+v, %v", u, err)
			}
			if uid, err := s.UserUID(ctx, "old", 20000, 59999); err != nil || uid != 20000 {
				t.Fatalf("uid %d, %v", uid, err)
			}
		})
	}
}
