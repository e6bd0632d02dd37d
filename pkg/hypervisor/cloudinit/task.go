package cloudinit

import (
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
)

// TaskScript is the name of the task runner's part of the vendor-data
// (the tiny test guest's /init looks for it by this name).
const TaskScript = "gpuvm-task.sh"

// Task is the task a VM runs (docs/tasks.md): its argv, or a script, and
// its environment. The seed's vendor-data carries the runner with them.
type Task struct {
	ID string
	// Command is the argv; Script, when set instead, the script.
	Command []string
	Script  string
	Env     map[string]string
	// ArrayID, Index and Count are an array's element's: its array, its
	// index and the array's number of elements (TASK_ARRAY_ID, TASK_INDEX,
	// TASK_COUNT); Attempt the attempt's number (TASK_ATTEMPT, when 2 or
	// more).
	ArrayID string
	Index   *int
	Count   int
	Attempt int
}

//go:embed runner/gpuvm-task.sh
var taskRunner string

// The heredocs' ends: a line of the command or script that is one of
// them is refused (problems).
const (
	taskCmdEnd    = "GPUVM_TASK_COMMAND_END"
	taskScriptEnd = "GPUVM_TASK_SCRIPT_END"
)

var (
	taskIDRE  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
)

// problems are what is wrong with t; its text goes into a shell script.
func (t *Task) problems() []string {
	var p []string
	if !taskIDRE.MatchString(t.ID) {
		p = append(p, fmt.Sprintf("task id %q: want 1 to 64 letters, digits, '-' or '_'", t.ID))
	}
	if t.ArrayID != "" && !taskIDRE.MatchString(t.ArrayID) {
		p = append(p, fmt.Sprintf("task array id %q: want 1 to 64 letters, digits, '-' or '_'", t.ArrayID))
	}
	if (len(t.Command) == 0) == (t.Script == "") {
		p = append(p, "task: want a command or a script, one of them")
	}
	all := append([]string{t.Script}, t.Command...)
	for k, v := range t.Env {
		if !envNameRE.MatchString(k) {
			p = append(p, fmt.Sprintf("task env %q: not a variable name", k))
		}
		all = append(all, v)
	}
	for _, s := range all {
		if strings.ContainsRune(s, 0) {
			p = append(p, "task: a NUL byte in its command, script or env")
			break
		}
	}
	for _, s := range all {
		for _, l := range strings.Split(s, "\n") {
			if l == taskScriptEnd || l == taskCmdEnd {
				return append(p, fmt.Sprintf("task: a line %q of its command, script or env would end the runner's copy of it", l))
			}
		}
	}
	return p
}

// Check says what is wrong with t for its runner, nil when nothing.
func (t *Task) Check() error {
	if p := t.problems(); len(p) > 0 {
		return errors.New(strings.Join(p, "; "))
	}
	return nil
}

// shQuote is s in single quotes for sh.
func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// taskScript is the vendor-data script that runs t as user in home (nil:
// none) and powers the guest off after: a header with the task's values
// and its command, then the runner (runner/gpuvm-task.sh).
func taskScript(t *Task, user string, home *Home) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#!/bin/sh\n# gpuvm: the task runner, task %s (docs/tasks.md).\n", t.ID)
	fmt.Fprintf(&b, "GPUVM_TASK_ID=%s\nGPUVM_TASK_USER=%s\n", shQuote(t.ID), shQuote(user))
	mount := ""
	if home != nil {
		mount = home.Mount
	}
	fmt.Fprintf(&b, "GPUVM_TASK_HOME=%s\nD=${GPUVM_TASK_DIR:-/run/gpuvm-task}\nmkdir -p \"$D\"\n", shQuote(mount))
	if t.Script != "" {
		s := t.Script
		if !strings.HasSuffix(s, "\n") {
			s += "\n"
		}
		fmt.Fprintf(&b, "cat >\"$D/script\" <<'%s'\n%s%s\n", taskScriptEnd, s, taskScriptEnd)
	}
	fmt.Fprintf(&b, "cat >\"$D/cmd\" <<'%s'\n", taskCmdEnd)
	fmt.Fprintf(&b, "export TASK_ID=%s\n", shQuote(t.ID))
	if t.Index != nil {
		fmt.Fprintf(&b, "export TASK_ARRAY_ID=%s TASK_INDEX=%d TASK_COUNT=%d\n", shQuote(t.ArrayID), *t.Index, t.Count)
	}
	if t.Attempt > 1 {
		fmt.Fprintf(&b, "export TASK_ATTEMPT=%d\n", t.Attempt)
	}
	for _, k := range sortedKeys(t.Env) {
		fmt.Fprintf(&b, "export %s=%s\n", k, shQuote(t.Env[k]))
	}
	if t.Script != "" {
		b.WriteString("exec \"$(dirname \"$0\")/script\"\n")
	} else {
		q := make([]string, len(t.Command))
		for i, a := range t.Command {
			q[i] = shQuote(a)
		}
		b.WriteString("exec " + strings.Join(q, " ") + "\n")
	}
	fmt.Fprintf(&b, "%s\n", taskCmdEnd)
	b.WriteString(taskRunner)
	return b.String()
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
