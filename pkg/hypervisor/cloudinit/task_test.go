package cloudinit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

func TestTaskProblems(t *testing.T) {
	for _, tc := range []struct {
		name string
		task Task
		want string
	}{
		{"ok", Task{ID: "a-1", Command: []string{"true"}}, ""},
		{"both", Task{ID: "a-1", Command: []string{"true"}, Script: "true"}, "one of them"},
		{"neither", Task{ID: "a-1"}, "one of them"},
		{"id", Task{ID: "a;rm", Command: []string{"true"}}, "task id"},
		{"env name", Task{ID: "a", Command: []string{"true"}, Env: map[string]string{"A B": "x"}}, `task env "A B"`},
		{"nul", Task{ID: "a", Command: []string{"a\x00b"}}, "NUL"},
		{"heredoc end", Task{ID: "a", Script: "echo\nGPUVM_TASK_SCRIPT_END\nrm -rf /"}, "would end"},
		{"heredoc end in argv", Task{ID: "a", Command: []string{"x\nGPUVM_TASK_COMMAND_END"}}, "would end"},
	} {
		got := strings.Join(tc.task.problems(), "; ")
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: problems %q, want %q", tc.name, got, tc.want)
		}
	}
}

// pty is a pseudo-terminal in raw mode standing in for the virtio port:
// the runner opens the slave's path, the test reads and writes the master.
func pty(t *testing.T) (*os.File, string) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	t.Cleanup(func() { m.Close() })
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	path := fmt.Sprintf("/dev/pts/%d", n)
	s, err := os.OpenFile(path, os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if _, err := term.MakeRaw(int(s.Fd())); err != nil {
		t.Fatal(err)
	}
	return m, path
}

type runnerMsg struct {
	T      string `json:"t"`
	V      int    `json:"v"`
	Off    int64  `json:"off"`
	D      string `json:"d"`
	Pid    int    `json:"pid"`
	Code   *int   `json:"code"`
	Signal *int   `json:"signal"`
}

// runRunner runs the runner of task on this machine with sh, as root's
// stand-in (no su), its port a pty, and returns what it said until exit
// (then it says bye, as gpuvmd does); onStart is called with the port when
// it says start.
func runRunner(t *testing.T, task *Task, onStart func(port *os.File)) []runnerMsg {
	t.Helper()
	return runRunnerWith(t, task, func(m runnerMsg, port *os.File) {
		if m.T == "start" && onStart != nil {
			onStart(port)
		}
	})
}

// runRunnerWith is runRunner with react called on each message.
func runRunnerWith(t *testing.T, task *Task, react func(m runnerMsg, port *os.File)) []runnerMsg {
	t.Helper()
	port, path := pty(t)
	dir := t.TempDir()
	script := filepath.Join(dir, "gpuvm-task.sh")
	if err := os.WriteFile(script, []byte(taskScript(task, "root", nil)), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", script, "run")
	cmd.Env = append(os.Environ(), "GPUVM_TASK_PORT="+path, "GPUVM_TASK_DIR="+filepath.Join(dir, "run"),
		"GPUVM_TASK_LOGDIR="+dir, "GPUVM_TASK_POWEROFF=true")
	// A file, not a pipe: Wait would wait for the heartbeat's last sleep.
	stderr, err := os.Create(filepath.Join(dir, "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = stderr
	said := func() string { b, _ := os.ReadFile(stderr.Name()); return string(b) }
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan []runnerMsg)
	go func() {
		var out []runnerMsg
		sc := bufio.NewScanner(port)
		for sc.Scan() {
			var m runnerMsg
			if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
				t.Errorf("not a JSON line: %q: %v", sc.Text(), err)
				continue
			}
			out = append(out, m)
			react(m, port)
			if m.T == "exit" {
				_, _ = port.WriteString(`{"t":"bye"}` + "\n")
				break
			}
		}
		done <- out
	}()
	select {
	case out := <-done:
		_ = cmd.Wait()
		log, _ := os.ReadFile(filepath.Join(dir, "gpuvm-task-"+task.ID+".log"))
		t.Logf("stderr: %s; log: %q", said(), log)
		return out
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("the runner said no exit in 30 s; stderr: %s", said())
		return nil
	}
}

func TestTaskRunner(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid")
	}
	task := &Task{ID: "t-1", Script: "for i in 1 2 3; do echo \"line $i\"; done\necho \"q\\\" b\\\\ $GREETING\" >&2\nexit 3\n",
		Env: map[string]string{"GREETING": "it's\thi"}}
	msgs := runRunner(t, task, nil)
	var kinds []string
	var text strings.Builder
	for _, m := range msgs {
		kinds = append(kinds, m.T)
		if m.T == "out" {
			if m.Off != int64(text.Len()) {
				t.Errorf("out at offset %d, want %d", m.Off, text.Len())
			}
			text.WriteString(m.D)
		}
	}
	if got := strings.Join(kinds, " "); got != "hello start out out out out exit" {
		t.Fatalf("messages %q", got)
	}
	if want := "line 1\nline 2\nline 3\nq\" b\\ it's\thi\n"; text.String() != want {
		t.Fatalf("output %q, want %q", text.String(), want)
	}
	last := msgs[len(msgs)-1]
	if *last.Code != 3 || *last.Signal != 0 {
		t.Fatalf("exit %d:%d, want 3:0", *last.Code, *last.Signal)
	}
}

func TestTaskRunnerSignal(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid")
	}
	task := &Task{ID: "t-2", Command: []string{"sh", "-c", "echo ready; sleep 30; echo never"}}
	msgs := runRunner(t, task, func(port *os.File) {
		time.Sleep(300 * time.Millisecond)
		_, _ = port.WriteString(`{"t":"signal","sig":"TERM"}` + "\n")
	})
	last := msgs[len(msgs)-1]
	if last.T != "exit" || *last.Code != 0 || *last.Signal != 15 {
		t.Fatalf("last message %+v, want exit 0:15", last)
	}
	for _, m := range msgs {
		if strings.Contains(m.D, "never") {
			t.Fatalf("the command went on after TERM: %+v", msgs)
		}
	}
}

// An array's element gets TASK_INDEX, TASK_COUNT and TASK_ARRAY_ID; the
// warning signal reaches the command's trap; a name the runner does not
// know is not sent.
func TestTaskRunnerArrayAndWarning(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid")
	}
	idx := 7
	task := &Task{ID: "arr-1_7", ArrayID: "arr-1", Index: &idx, Count: 10, Attempt: 2,
		Command: []string{"sh", "-c", `trap 'echo warned $TASK_ID $TASK_INDEX $TASK_COUNT $TASK_ARRAY_ID $TASK_ATTEMPT; exit 7' USR1; echo ready; while :; do sleep 0.1; done`}}
	msgs := runRunner(t, task, func(port *os.File) {
		time.Sleep(300 * time.Millisecond)
		_, _ = port.WriteString(`{"t":"signal","sig":"STOP"}` + "\n")
		_, _ = port.WriteString(`{"t":"signal","sig":"USR1"}` + "\n")
	})
	var text strings.Builder
	for _, m := range msgs {
		text.WriteString(m.D)
	}
	last := msgs[len(msgs)-1]
	if !strings.Contains(text.String(), "warned arr-1_7 7 10 arr-1 2\n") || last.T != "exit" || *last.Code != 7 {
		t.Fatalf("output %q, last %+v", text.String(), last)
	}
}

// gpuvmd connects again and keeps the output up to N: the runner says
// resume and sends its output from byte N again, from the log it keeps,
// then what comes after; its exit carries the output's size, and a last
// line without a newline gets one.
func TestTaskRunnerResumesFrom(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("no setsid")
	}
	gate := filepath.Join(t.TempDir(), "go")
	task := &Task{ID: "t-3", Script: "for i in 1 2 3 4 5; do echo \"line $i\"; done\n" +
		"while [ ! -e \"$GATE\" ]; do sleep 0.05; done\necho line 6\nprintf 'line 7 \\303\\251'\n",
		Env: map[string]string{"GATE": gate}}
	full := "line 1\nline 2\nline 3\nline 4\nline 5\nline 6\nline 7 \u00e9\n"
	from := int64(len("line 1\nline 2\n"))
	var resumed bool
	msgs := runRunnerWith(t, task, func(m runnerMsg, port *os.File) {
		switch {
		case m.T == "out" && strings.HasPrefix(m.D, "line 5") && !resumed:
			resumed = true
			_, _ = fmt.Fprintf(port, `{"t":"from","v":2,"off":%d}`+"\n", from)
		case m.T == "resume":
			if err := os.WriteFile(gate, nil, 0o644); err != nil {
				t.Error(err)
			}
		}
	})
	var before, after strings.Builder
	var seen bool
	for _, m := range msgs {
		switch m.T {
		case "resume":
			if m.Off != from || m.V != 2 {
				t.Fatalf("resume %+v, want from %d, v 2", m, from)
			}
			seen = true
		case "out":
			b := &before
			if seen {
				b = &after
			}
			if m.Off != int64(b.Len()) && !(seen && m.Off == from+int64(b.Len())) {
				t.Errorf("out at %d after %q", m.Off, b.String())
			}
			b.WriteString(m.D)
		}
	}
	if before.String() != full[:len("line 1\nline 2\nline 3\nline 4\nline 5\n")] {
		t.Fatalf("before the resume: %q", before.String())
	}
	if after.String() != full[from:] {
		t.Fatalf("after the resume from %d: %q, want %q", from, after.String(), full[from:])
	}
	last := msgs[len(msgs)-1]
	if last.T != "exit" || last.Off != int64(len(full)) || *last.Code != 0 {
		t.Fatalf("last %+v, want exit 0 with off %d", last, len(full))
	}
	if hello := msgs[0]; hello.T != "hello" || hello.V != 2 {
		t.Fatalf("first %+v, want hello v 2", hello)
	}
}
