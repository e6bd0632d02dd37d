package kit

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"

	"github.com/gofrs/flock"

	"github.com/gpuvm/gpuvm/pkg/backend"
)

// Entry states in the ledger: an entry is written as Creating before the host
// is changed (intent first), and becomes Created once the device exists.
const (
	Creating = "creating"
	Created  = "created"
)

// Entry is one device a backend made, with what it needs to undo it.
type Entry struct {
	Device backend.Device `json:"device"`
	State  string         `json:"state"`
	// Functions are the PCI functions a passthrough device moved to vfio-pci,
	// with the driver each had before.
	Functions map[string]string `json:"functions,omitempty"`
}

// Ledger is a backend's record of the devices it created, in a JSON file
// guarded by a file lock. It is how a backend tells its own devices from an
// admin's, and how it finds the MIG instances under a device to remove them.
type Ledger struct {
	path string
	mu   sync.Mutex // one flock per process: goroutines queue here first
	lock *flock.Flock
}

// OpenLedger opens (creating if needed) the ledger at path.
func OpenLedger(path string) (*Ledger, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create ledger directory: %w", err)
	}
	// pkg/backup reads ledgers under this lock too: keep the name.
	return &Ledger{path: path, lock: flock.New(path + ".lock")}, nil
}

func (l *Ledger) load() (map[string]*Entry, error) {
	m := map[string]*Entry{}
	b, err := os.ReadFile(l.path)
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read ledger %s: %w", l.path, err)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("ledger %s is corrupt: %w", l.path, err)
	}
	return m, nil
}

func (l *Ledger) save(m map[string]*Entry) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode ledger: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(l.path), ".ledger-*.json")
	if err != nil {
		return fmt.Errorf("write ledger: %w", err)
	}
	defer os.Remove(f.Name())
	_, werr := f.Write(b)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return fmt.Errorf("write ledger: %w", err)
	}
	if err := os.Rename(f.Name(), l.path); err != nil {
		return fmt.Errorf("write ledger: %w", err)
	}
	return nil
}

func (l *Ledger) with(fn func(m map[string]*Entry) (bool, error)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.lock.Lock(); err != nil {
		return fmt.Errorf("lock ledger: %w", err)
	}
	defer l.lock.Unlock()
	m, err := l.load()
	if err != nil {
		return err
	}
	changed, err := fn(m)
	if err != nil || !changed {
		return err
	}
	return l.save(m)
}

// Put records or replaces an entry, keyed by its device ID.
func (l *Ledger) Put(e Entry) error {
	return l.with(func(m map[string]*Entry) (bool, error) {
		m[e.Device.ID] = &e
		return true, nil
	})
}

// Delete forgets a device.
func (l *Ledger) Delete(id string) error {
	return l.with(func(m map[string]*Entry) (bool, error) {
		_, ok := m[id]
		delete(m, id)
		return ok, nil
	})
}

// Get returns the entry of a device.
func (l *Ledger) Get(id string) (Entry, bool, error) {
	var out Entry
	var ok bool
	err := l.with(func(m map[string]*Entry) (bool, error) {
		if e, found := m[id]; found {
			out, ok = *e, true
		}
		return false, nil
	})
	return out, ok, err
}

// All returns every entry, sorted by device ID.
func (l *Ledger) All() ([]Entry, error) {
	var out []Entry
	err := l.with(func(m map[string]*Entry) (bool, error) {
		for _, e := range m {
			out = append(out, *e)
		}
		return false, nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Device.ID < out[j].Device.ID })
	return out, err
}
