package orchestrator

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// SpecTask is the key of a VM's spec that names the task the VM serves
// (docs/tasks.md): its domain gets the task channel, its seed the runner.
const SpecTask = "task"

// TaskOfSpec is the task a VM's recorded spec names; "" when none (or a
// spec that is not JSON).
func TaskOfSpec(spec string) string {
	var s struct {
		Task string `json:"task"`
	}
	if spec == "" || json.Unmarshal([]byte(spec), &s) != nil {
		return ""
	}
	return s.Task
}

// seedTask is the task vm serves as its seed carries it; nil for a VM of
// no task.
func (lc *lifecycle) seedTask(ctx context.Context, vm *store.VM) (*cloudinit.Task, error) {
	id := TaskOfSpec(vm.Spec)
	if id == "" {
		return nil, nil
	}
	t, err := lc.st.GetTask(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("vm %s: its task: %w", vm.ID, err)
	}
	return SeedTask(t)
}

// SeedTask is a task's row as the runner in the seed gets it.
func SeedTask(t *store.Task) (*cloudinit.Task, error) {
	out := &cloudinit.Task{ID: t.ID, Script: t.Script, ArrayID: t.ArrayID, Index: t.ArrayIndex, Count: t.ArrayCount, Attempt: t.Attempt}
	if t.Command != "" {
		if err := json.Unmarshal([]byte(t.Command), &out.Command); err != nil {
			return nil, fmt.Errorf("task %s: its command: %w", t.ID, err)
		}
	}
	if t.Env != "" {
		if err := json.Unmarshal([]byte(t.Env), &out.Env); err != nil {
			return nil, fmt.Errorf("task %s: its env: %w", t.ID, err)
		}
	}
	return out, nil
}
