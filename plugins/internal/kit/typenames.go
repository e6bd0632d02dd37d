package kit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// TypeNames remembers the names of vendor-VFIO vGPU type IDs. A VF lists
// only the types it can still take, so once a type is exhausted, or a VF is
// occupied, no sysfs file names it any more; the IDs the driver listed
// earlier are remembered here (and on disk, across restarts). Each backend
// keeps its own file (NAME-vgpu-types.json); a name it never saw is looked
// up in the other backends' files: the mig backend learns the ID of a
// MIG-backed type when it makes one (the type is listed only once its GPU
// instance exists), and the vgpu backend then sees the VF hold that ID.
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

// typeNamesSuffix ends the name of every backend's file of type names.
const typeNamesSuffix = "-vgpu-types.json"

// Name returns the name of a type ID: as this backend learned it, else as
// another backend of the host did.
func (t *TypeNames) Name(id int) (string, bool) {
	t.mu.Lock()
	n, ok := t.m[id]
	t.mu.Unlock()
	if ok {
		return n, true
	}
	if n, ok = t.fromSiblings(id); ok {
		t.Learn(map[int]string{id: n})
	}
	return n, ok
}

// fromSiblings reads the name of a type ID from the other backends' files
// beside this one's.
func (t *TypeNames) fromSiblings(id int) (string, bool) {
	if t.path == "" {
		return "", false
	}
	files, _ := filepath.Glob(filepath.Join(filepath.Dir(t.path), "*"+typeNamesSuffix))
	for _, f := range files {
		if f == t.path || !strings.HasSuffix(f, typeNamesSuffix) {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		var m map[int]string
		if json.Unmarshal(b, &m) != nil {
			continue
		}
		if n, ok := m[id]; ok && n != "" {
			return n, true
		}
	}
	return "", false
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
