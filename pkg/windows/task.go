package windows

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
)

// The task runner of a Windows guest (docs/tasks.md, "Windows guests"):
// one script for every task, baked into the image, that finds the task in
// TaskSpecFile on a drive's root (a task's seed CD-ROM) and runs it.
const (
	// TaskRunnerFile is the runner (templates/windows/gpuvm-task.ps1.tmpl).
	TaskRunnerFile = "gpuvm-task.ps1"
	// TaskSpecFile is the task the runner runs (TaskSpec).
	TaskSpecFile = "gpuvm-task.json"
	// TaskPort is the task channel's virtio-serial port name, as the
	// domain names it; the runner opens it as TaskPortPath.
	TaskPort     = "org.gpuvm.task.0"
	TaskPortPath = `\\.\Global\` + TaskPort
	// TaskProtocol is the channel protocol's version the runner speaks
	// (pkg/task.Protocol; a test keeps the two equal).
	TaskProtocol = 2
	// TaskMaxPiece bounds the output one "out" message carries, as the
	// Linux runner's (docs/tasks.md).
	TaskMaxPiece = 32 << 10
	// TaskHeartbeat is the time between heartbeats; TaskLinger how long
	// the runner sends its exit without a "bye" before it powers off.
	TaskHeartbeat = 10 * time.Second
	TaskLinger    = 10 * time.Minute
)

// TaskSignals are the signal names the Windows runner carries out
// (TERM and INT: Ctrl+Break to the command's process group; KILL: the
// command's job ended). It refuses the others.
var TaskSignals = []string{"TERM", "INT", "KILL"}

type taskRunnerData struct {
	SpecFile, Port, PortPath                string
	Protocol, MaxPiece, HeartbeatS, LingerS int
}

// TaskRunner renders TaskRunnerFile from "gpuvm-task.ps1.tmpl" in tmpls
// (DefaultTemplates() when nil, or when tmpls lacks it). It holds nothing
// of any task: an admin bakes it into an image once (docs/tasks.md).
func TaskRunner(tmpls fs.FS) ([]byte, error) {
	return renderTemplate(tmpls, TaskRunnerFile, taskRunnerData{SpecFile: TaskSpecFile, Port: TaskPort, PortPath: TaskPortPath,
		Protocol: TaskProtocol, MaxPiece: TaskMaxPiece, HeartbeatS: int(TaskHeartbeat / time.Second), LingerS: int(TaskLinger / time.Second)})
}

// TaskSpec is TaskSpecFile: the task as the Windows runner reads it
// (ConvertFrom-Json). Env holds the whole environment the command gets
// beside the person's own: TASK_ID, an array element's TASK_ARRAY_ID,
// TASK_INDEX and TASK_COUNT, TASK_ATTEMPT from the second attempt, and the
// task's env (which wins, as in the Linux runner's exports).
type TaskSpec struct {
	V  int    `json:"v"`
	ID string `json:"id"`
	// User is the person's local account; the runner runs the command as
	// SYSTEM where the guest has none.
	User string `json:"user,omitempty"`
	// Command is the argv; CommandLine is it as one Windows command line
	// (CommandLine), which the runner starts.
	Command     []string          `json:"command,omitempty"`
	CommandLine string            `json:"command_line,omitempty"`
	Script      string            `json:"script,omitempty"`
	Env         map[string]string `json:"env"`
	// KillWaitS is how long after TERM the runner ends the command itself
	// when gpuvmd's KILL has not come.
	KillWaitS int `json:"kill_wait_s"`
	// Home, when set, is the working directory (a mapped home's drive,
	// "H:\"); else the person's profile directory.
	Home string `json:"home,omitempty"`
}

// NewTaskSpec is TaskSpecFile for t, run as user (a Windows account name),
// with the task's kill wait.
func NewTaskSpec(t *cloudinit.Task, user string, killWait time.Duration) ([]byte, error) {
	if t == nil {
		return nil, errors.New("task: none")
	}
	if err := t.Check(); err != nil {
		return nil, err
	}
	if user != "" {
		if err := userName(user); err != nil {
			return nil, fmt.Errorf("task user %q: %w", user, err)
		}
	}
	if killWait < 0 || killWait > 10*time.Minute {
		return nil, fmt.Errorf("task kill wait %s: want 0s to 10m", killWait)
	}
	s := TaskSpec{V: 1, ID: t.ID, User: user, Script: t.Script, KillWaitS: int(killWait / time.Second),
		Env: map[string]string{"TASK_ID": t.ID}}
	if len(t.Command) > 0 {
		cl, err := CommandLine(t.Command)
		if err != nil {
			return nil, err
		}
		s.Command, s.CommandLine = t.Command, cl
	}
	if t.Index != nil {
		s.Env["TASK_ARRAY_ID"] = t.ArrayID
		s.Env["TASK_INDEX"] = fmt.Sprint(*t.Index)
		s.Env["TASK_COUNT"] = fmt.Sprint(t.Count)
	}
	if t.Attempt > 1 {
		s.Env["TASK_ATTEMPT"] = fmt.Sprint(t.Attempt)
	}
	for k, v := range t.Env {
		s.Env[k] = v
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// maxCommandLine is CreateProcess's bound on a command line (32,767
// characters with its NUL).
const maxCommandLine = 32766

// CommandLine joins argv into one Windows command line that
// CommandLineToArgvW, and the C runtime's parser every common program
// uses, split back into argv: the program name quoted when it holds a
// space or tab (it takes no escapes: a '"' in it is refused), each other
// argument quoted when it is empty or holds a space, tab, newline or '"',
// a '"' escaped with a backslash and the backslashes before a '"' doubled
// (what Go's syscall.EscapeArg does). cmd.exe's own rules (^, %) are not
// applied: a command of cmd's, or a .bat, is run with "cmd /c".
func CommandLine(argv []string) (string, error) {
	if len(argv) == 0 || argv[0] == "" {
		return "", errors.New("task command: no program")
	}
	if strings.ContainsRune(argv[0], '"') {
		return "", fmt.Errorf("task command: the program %q holds a '\"', which a Windows command line cannot carry in a program's name", argv[0])
	}
	var b strings.Builder
	if strings.ContainsAny(argv[0], " \t") {
		b.WriteString(`"` + argv[0] + `"`)
	} else {
		b.WriteString(argv[0])
	}
	for _, a := range argv[1:] {
		b.WriteByte(' ')
		b.WriteString(quoteArg(a))
	}
	if n := len([]rune(b.String())); n > maxCommandLine {
		return "", fmt.Errorf("task command: %d characters as a Windows command line, at most %d", n, maxCommandLine)
	}
	return b.String(), nil
}

func quoteArg(a string) string {
	if a != "" && !strings.ContainsAny(a, " \t\n\v\"") {
		return a
	}
	var b strings.Builder
	b.WriteByte('"')
	slashes := 0
	for _, r := range a {
		switch r {
		case '\\':
			slashes++
			continue
		case '"':
			b.WriteString(strings.Repeat(`\`, 2*slashes+1))
		default:
			b.WriteString(strings.Repeat(`\`, slashes))
		}
		slashes = 0
		b.WriteRune(r)
	}
	b.WriteString(strings.Repeat(`\`, 2*slashes))
	b.WriteByte('"')
	return b.String()
}
