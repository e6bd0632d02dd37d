package store

import (
	"encoding/json"
	"fmt"
)

// SpecTask is the key of a VM's spec (VM.Spec) that names the task the VM
// serves (docs/tasks.md): a task's own VM, or its owner's VM that a task
// runs in (--in) until the task has ended.
const SpecTask = "task"

// TaskOfSpec is the task a VM's recorded spec names (SpecTask); "" when
// none (or a spec that is not JSON).
func TaskOfSpec(spec string) string {
	var s struct {
		Task string `json:"task"` // SpecTask
	}
	if spec == "" || json.Unmarshal([]byte(spec), &s) != nil {
		return ""
	}
	return s.Task
}

// SpecWithKeys is a VM's spec with keys set (an empty value removes the
// key) and every other key kept as it is; a spec left empty is "", as a VM
// made without one has it. The one writer of a spec's keys after the VM
// is made: the resize's, a task's.
func SpecWithKeys(spec string, set map[string]string) (string, error) {
	m := map[string]json.RawMessage{}
	if spec != "" {
		if err := json.Unmarshal([]byte(spec), &m); err != nil {
			return "", fmt.Errorf("read the VM's spec: %w", err)
		}
	}
	for k, v := range set {
		if v == "" {
			delete(m, k)
			continue
		}
		b, _ := json.Marshal(v)
		m[k] = b
	}
	if len(m) == 0 {
		return "", nil
	}
	b, err := json.Marshal(m)
	return string(b), err
}
