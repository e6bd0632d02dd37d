package orchestrator

import (
	"context"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/config"
)

// Each job reads its settings from the configuration in force at each
// call: a reload (SIGHUP swaps what Profiles returns) applies to the next
// round, for every job, with nothing rebuilt.
func TestJobSettingsFollowReload(t *testing.T) {
	berlin := time.FixedZone("CET", 3600)
	first := &config.Config{Profiles: map[string]*config.Profile{"a": {Name: "a"}}}
	first.Server.Libvirt.StoragePool = "pool-1"
	second := &config.Config{Profiles: map[string]*config.Profile{"b": {Name: "b"}}}
	second.Server.Libvirt.StoragePool = "pool-2"
	second.Policy.Location = berlin
	live := first
	o := New(Config{Profiles: func() *config.Config { return live }, Host: "h1", ShutdownTimeout: 7 * time.Second})

	tests := []struct {
		name        string
		cfg         *config.Config
		profile     string
		pool        string
		loc         *time.Location
		noProfileOf string
	}{
		{"first", first, "a", "pool-1", nil, "b"},
		{"after a reload", second, "b", "pool-2", berlin, "a"},
		{"a reload to nothing", nil, "", "", nil, "b"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			live = tc.cfg
			ls, ds, rs, cs := o.life.settings(), o.disp.settings(), o.rules.settings(), o.rec.settings()
			if tc.profile != "" && (ls.Profiles[tc.profile] == nil || cs.Profiles[tc.profile] == nil) {
				t.Errorf("profile %q missing: lifecycle %v, reconciler %v", tc.profile, ls.Profiles, cs.Profiles)
			}
			if ls.Profiles[tc.noProfileOf] != nil || o.life.profile(tc.noProfileOf) != nil {
				t.Errorf("profile %q of another configuration is still there", tc.noProfileOf)
			}
			if ls.Libvirt.StoragePool != tc.pool || cs.StoragePool != tc.pool || ls.Location != tc.loc {
				t.Errorf("pool %q/%q, location %v; want %q, %v", ls.Libvirt.StoragePool, cs.StoragePool, ls.Location, tc.pool, tc.loc)
			}
			// The rounds never see a nil configuration.
			if ds.Config == nil || rs.Config == nil {
				t.Fatalf("nil configuration: dispatcher %v, rules %v", ds.Config, rs.Config)
			}
			if tc.cfg != nil && (ds.Config != tc.cfg || rs.Config != tc.cfg) {
				t.Errorf("the rounds read another configuration than the one in force")
			}
			// Config's own settings stay.
			if o.life.host != "h1" || o.disp.host != "h1" || o.rec.host != "h1" || o.fleet.host != "h1" || ls.ShutdownTimeout != 7*time.Second || cs.ShutdownTimeout != 7*time.Second {
				t.Errorf("static settings: %+v %+v", ls, cs)
			}
		})
	}
}

// With no Leader, Notifier or Idle (one server, no webhook, no idle
// detection), the stand-ins New puts in their place lead, send nothing and
// find nothing idle.
func TestOptionalDependencies(t *testing.T) {
	o := New(Config{})
	if !o.rules.leader.IsLeader() {
		t.Error("a single server does not lead")
	}
	if idle, err := o.rules.idle.IdleVMs(context.Background()); idle != nil || err != nil {
		t.Errorf("idle VMs %v, %v", idle, err)
	}
	o.rules.notifier.Notify("http://example.invalid", api.AlertNotification{}) // must not panic
	if o.life.testHook != nil {
		t.Error("a hook without WithHook")
	}
	called := ""
	o = New(Config{}, WithHook(func(vmID, point string) error { called = vmID + " " + point; return nil }))
	if err := o.life.hook("vm1", HookClaimed); err != nil || called != "vm1 "+HookClaimed {
		t.Errorf("hook: %v, called %q", err, called)
	}
}

func TestBusySet(t *testing.T) {
	b := &busySet{m: map[string]bool{}}
	steps := []struct {
		id   string
		busy bool
		ok   bool
	}{
		{"a", true, true},
		{"a", true, false}, // a worker is on it already
		{"b", true, true},
		{"a", false, true},
		{"a", true, true},
	}
	for i, s := range steps {
		if got := b.set(s.id, s.busy); got != s.ok {
			t.Errorf("step %d: set(%s, %v) = %v, want %v", i, s.id, s.busy, got, s.ok)
		}
	}
	all := b.all()
	if len(all) != 2 || !all["a"] || !all["b"] || !b.is("a") || b.is("c") {
		t.Errorf("busy %v", all)
	}
	all["c"] = true // a copy
	if b.is("c") {
		t.Error("all returned the set itself")
	}
}
