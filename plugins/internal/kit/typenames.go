package kit

import (
	"encoding/json"
	"os"
	"sync"
)

// TypeNames remembers the names of vendor-VFIO vGPU type IDs. A VF lists
// only the types it can still take, so once a type is exhausted, or a VF is
// occupied, no sysfs file names it any more; the IDs the driver listed
// earlier are remembered here (and on disk, across restarts).
type TypeNames struct {
	path string
	mu   sync.Mutex
	m    map[int]string
}

func openTypeNames(path string) *TypeNames {
	t := &TypeNames{path: path, m: map[int]string{}}
	if b, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(b, &t.m) // a damaged cache is relearned
	}
	return t
}

// Learn records names; it saves when something new was learned.
func (t *TypeNames) Learn(names map[int]string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	changed := false
	for id, n := range names {
		if t.m[id] != n {
			t.m[id], changed = n, true
		}
	}
	if changed && t.path != "" {
		if b, err := json.Marshal(t.m); err == nil {
			tmp := t.path + ".tmp"
			if os.WriteFile(tmp, b, 0o644) == nil {
				_ = os.Rename(tmp, t.path)
			}
		}
	}
}

// Name returns the name of a type ID.
func (t *TypeNames) Name(id int) (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n, ok := t.m[id]
	return n, ok
}

// ID returns the ID of a type name.
func (t *TypeNames) ID(name string) (int, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, n := range t.m {
		if n == name {
			return id, true
		}
	}
	return 0, false
}
