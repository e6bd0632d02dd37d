// Package cluster holds what the tests that run a fleet of real gpuvmd
// processes on one PostgreSQL schema share (test/fleet, test/bench's scale
// harness with GPUVM_SCALE_NODES): a node's configuration and flags, and
// the database's load read from PostgreSQL's cumulative statistics.
package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Node is one gpuvmd of a fleet: its name (the host it registers as), its
// heartbeat (zero: gpuvmd's defaults) and the profiles it serves (the text
// of profiles.hcl).
type Node struct {
	Name      string
	Heartbeat time.Duration // heartbeat_interval; 0 leaves gpuvmd's default
	Timeout   time.Duration // heartbeat_timeout; 0 leaves gpuvmd's default
	Profiles  string
}

// ServerHCL is the node's server.hcl: its node block and the libvirt
// storage pool every node of a test fleet names.
func (n Node) ServerHCL() string {
	var b strings.Builder
	fmt.Fprintf(&b, "server {\n  node {\n    name               = %q\n", n.Name)
	if n.Heartbeat > 0 {
		fmt.Fprintf(&b, "    heartbeat_interval = %q\n", durationHCL(n.Heartbeat))
	}
	if n.Timeout > 0 {
		fmt.Fprintf(&b, "    heartbeat_timeout  = %q\n", durationHCL(n.Timeout))
	}
	b.WriteString("  }\n  libvirt {\n    storage_pool = \"gpuvm\"\n  }\n}\n")
	return b.String()
}

// durationHCL writes d as the configuration reads it: whole seconds when
// it is some, else milliseconds.
func durationHCL(d time.Duration) string {
	if d%time.Second == 0 {
		return fmt.Sprintf("%ds", int64(d/time.Second))
	}
	return fmt.Sprintf("%dms", d.Milliseconds())
}

// WriteConfig writes server.hcl and profiles.hcl into dir (gpuvmd's
// --config).
func (n Node) WriteConfig(dir string) error {
	if n.Name == "" {
		return fmt.Errorf("cluster: a node needs a name")
	}
	for file, text := range map[string]string{"server.hcl": n.ServerHCL(), "profiles.hcl": n.Profiles} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(text), 0o644); err != nil {
			return fmt.Errorf("cluster: node %s: %w", n.Name, err)
		}
	}
	return nil
}

// Args are gpuvmd's flags for a node of a fleet: its configuration and
// state directories, the fleet's database, libvirt's test driver and a
// simulated GPU server of preset (in the state directory).
func Args(configDir, stateDir, dsn, preset string) []string {
	return []string{"--config", configDir, "--state-dir", stateDir, "--database", dsn,
		"--libvirt-uri", "test:///default", "--simulate", preset}
}
