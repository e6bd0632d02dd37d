package windows

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/gpuvm/gpuvm/pkg/hypervisor/cloudinit"
)

// golden compares got with testdata/NAME.golden (-update rewrites it).
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update writes it)", err)
	}
	if string(want) != string(got) {
		t.Errorf("%s differs from what was rendered (go test -update rewrites it):\n%s", path, got)
	}
}

func TestTaskRunnerGolden(t *testing.T) {
	b, err := TaskRunner(nil)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, TaskRunnerFile, b)
	s := string(b)
	for _, want := range []string{
		`$PortPath = '\\.\Global\org.gpuvm.task.0'`,
		`$SpecFile = 'gpuvm-task.json'`,
		`$Protocol = 2`,
		`$MaxPiece = 32768`,
		`$Heartbeat = 10 `,
		`$Linger = 600 `,
		`-LogonType S4U`,
		`-ExecutionTimeLimit ([TimeSpan]::Zero)`,
		`Stop-Computer -Force`,
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the runner lacks %q", want)
		}
	}
	if strings.Contains(s, "{{") || strings.Contains(s, "<no value>") {
		t.Error("the runner holds an unrendered template action")
	}
}

// The PowerShell and C# parts are never run here (no PowerShell on this
// machine): their brackets, here-string and quotes are checked as far as
// text can check them.
func TestTaskRunnerBalanced(t *testing.T) {
	b, _ := TaskRunner(nil)
	s := string(b)
	start, end := strings.Index(s, "@'\n"), strings.Index(s, "\n'@\n")
	if start < 0 || end < start {
		t.Fatal("the C# here-string is not closed")
	}
	cs, ps := s[start+3:end], s[:start]+s[end+4:]
	for name, src := range map[string]string{"C#": cs, "PowerShell": ps} {
		depth := map[rune]int{}
		pairs := map[rune]rune{'}': '{', ')': '(', ']': '['}
		for i, l := range strings.Split(src, "\n") {
			l = stripStrings(l, name == "C#")
			if j := strings.Index(l, "//"); name == "C#" && j >= 0 {
				l = l[:j]
			}
			if j := strings.Index(l, "#"); name == "PowerShell" && j >= 0 && strings.TrimSpace(l[:j]) == "" {
				l = ""
			}
			for _, r := range l {
				switch r {
				case '{', '(', '[':
					depth[r]++
				case '}', ')', ']':
					depth[pairs[r]]--
					if depth[pairs[r]] < 0 {
						t.Fatalf("%s line %d: %q closes what was not opened", name, i+1, l)
					}
				}
			}
		}
		for r, n := range depth {
			if n != 0 {
				t.Errorf("%s: %d %q left open", name, n, r)
			}
		}
	}
}

// stripStrings blanks string literals: '…' and "…" (PowerShell: ` escapes;
// C#: \ escapes, and '…' is a char).
func stripStrings(l string, cs bool) string {
	var b strings.Builder
	var in rune
	esc := false
	for _, r := range l {
		switch {
		case esc:
			esc = false
			continue
		case in != 0 && ((cs && r == '\\') || (!cs && r == '`')):
			esc = true
			continue
		case in != 0 && r == in:
			in = 0
		case in == 0 && (r == '"' || r == '\''):
			in = r
		case in == 0:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestTaskRunnerOverride(t *testing.T) {
	b, err := TaskRunner(fstest.MapFS{TaskRunnerFile + ".tmpl": {Data: []byte("port {{ps .PortPath}} v{{.Protocol}}\n")}})
	if err != nil || string(b) != "port '\\\\.\\Global\\org.gpuvm.task.0' v2\n" {
		t.Errorf("override = %q, %v", b, err)
	}
	builtin, _ := TaskRunner(nil)
	b, err = TaskRunner(fstest.MapFS{"other.tmpl": {Data: []byte("x")}})
	if err != nil || string(b) != string(builtin) {
		t.Errorf("a directory without the template: %v, want the built-in one", err)
	}
	if _, err := TaskRunner(fstest.MapFS{TaskRunnerFile + ".tmpl": {Data: []byte("{{.NoSuchField}}")}}); err == nil || !strings.Contains(err.Error(), TaskRunnerFile) {
		t.Errorf("a template naming no field: %v, want an error naming the template", err)
	}
}

func TestTaskSpec(t *testing.T) {
	idx := 7
	cases := map[string]struct {
		task cloudinit.Task
		user string
		wait time.Duration
	}{
		"task-spec-command": {cloudinit.Task{ID: "0192f0aa-1111-7000-8000-000000000001",
			Command: []string{`C:\Program Files\Python312\python.exe`, "train.py", "--name", `a "quoted" value`, `C:\dir with space\`, ""},
			Env:     map[string]string{"EPOCHS": "30", "TASK_ID": "not this"}}, "alice", 30 * time.Second},
		"task-spec-array-script": {cloudinit.Task{ID: "0192f0aa-2222_7", ArrayID: "0192f0aa-2222", Index: &idx, Count: 10, Attempt: 2,
			Script: "Write-Output \"seed $env:TASK_INDEX\"\r\nexit 3\r\n"}, "Jürgen", 0},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			b, err := NewTaskSpec(&c.task, c.user, c.wait)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, name, b)
			var s TaskSpec
			if err := json.Unmarshal(b, &s); err != nil {
				t.Fatal(err)
			}
			if s.ID != c.task.ID || s.User != c.user || s.KillWaitS != int(c.wait/time.Second) || s.Script != c.task.Script {
				t.Errorf("spec = %+v", s)
			}
			if s.Env["TASK_ID"] != c.task.ID && c.task.Env["TASK_ID"] == "" {
				t.Errorf("TASK_ID = %q", s.Env["TASK_ID"])
			}
			if len(c.task.Command) > 0 {
				if got := splitCommandLine(s.CommandLine); !equal(got, c.task.Command) {
					t.Errorf("command line %s splits into %q, want %q", s.CommandLine, got, c.task.Command)
				}
			}
		})
	}
	b, _ := NewTaskSpec(&cloudinit.Task{ID: "a_1", Index: &idx, ArrayID: "a", Count: 9, Attempt: 3, Command: []string{"x"}}, "", 0)
	var s TaskSpec
	_ = json.Unmarshal(b, &s)
	for k, v := range map[string]string{"TASK_ID": "a_1", "TASK_ARRAY_ID": "a", "TASK_INDEX": "7", "TASK_COUNT": "9", "TASK_ATTEMPT": "3"} {
		if s.Env[k] != v {
			t.Errorf("env %s = %q, want %q", k, s.Env[k], v)
		}
	}
}

func TestTaskSpecRefusals(t *testing.T) {
	ok := cloudinit.Task{ID: "t1", Command: []string{"python"}}
	cases := []struct {
		name string
		task cloudinit.Task
		user string
		wait time.Duration
		want string
	}{
		{"bad id", cloudinit.Task{ID: "a b", Command: []string{"x"}}, "u", 0, "task id"},
		{"neither", cloudinit.Task{ID: "t"}, "u", 0, "a command or a script"},
		{"env name", cloudinit.Task{ID: "t", Command: []string{"x"}, Env: map[string]string{"A-B": "1"}}, "u", 0, "task env"},
		{"NUL", cloudinit.Task{ID: "t", Command: []string{"x", "a\x00b"}}, "u", 0, "NUL"},
		{"user", ok, `dom\alice`, 0, "task user"},
		{"built-in user", ok, "Administrator", 0, "task user"},
		{"kill wait", ok, "u", 11 * time.Minute, "kill wait"},
		{"quote in program", cloudinit.Task{ID: "t", Command: []string{`a"b`}}, "u", 0, "program"},
		{"empty program", cloudinit.Task{ID: "t", Command: []string{""}}, "u", 0, "no program"},
		{"too long", cloudinit.Task{ID: "t", Command: []string{"x", strings.Repeat("y", 40000)}}, "u", 0, "command line"},
	}
	for _, c := range cases {
		if _, err := NewTaskSpec(&c.task, c.user, c.wait); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %q", c.name, err, c.want)
		}
	}
	if _, err := NewTaskSpec(nil, "u", 0); err == nil {
		t.Error("no task: accepted")
	}
}

func TestCommandLine(t *testing.T) {
	cases := map[string][]string{
		`python train.py`:                  {"python", "train.py"},
		`"C:\Program Files\x.exe" ""`:      {`C:\Program Files\x.exe`, ""},
		`x "a b" "say \"hi\"" c:\d\`:       {"x", "a b", `say "hi"`, `c:\d\`},
		`x "c:\dir with space\\"`:          {"x", `c:\dir with space\`},
		`x "a\\\"b"`:                       {"x", `a\"b`},
		`x "tab	in" "new` + "\n" + `line"`: {"x", "tab\tin", "new\nline"},
		`x a\\b`:                           {"x", `a\\b`},
	}
	for want, argv := range cases {
		got, err := CommandLine(argv)
		if err != nil || got != want {
			t.Errorf("CommandLine(%q) = %s, %v; want %s", argv, got, err, want)
		}
		if back := splitCommandLine(got); !equal(back, argv) {
			t.Errorf("%s splits into %q, want %q", got, back, argv)
		}
	}
	// Hostile arguments round-trip.
	hostile := []string{`\`, `\\`, `"`, `\"`, `a\\\"b\`, `" & del /q *`, "%PATH% ^ | <>", "ünï €", `\\server\share\`}
	argv := append([]string{"prog"}, hostile...)
	got, _ := CommandLine(argv)
	if back := splitCommandLine(got); !equal(back, argv) {
		t.Errorf("%s splits into %q, want %q", got, back, argv)
	}
}

// splitCommandLine is CommandLineToArgvW's split (the C runtime's since
// 2008 for what CommandLine writes): the program name up to a space or
// tab, or between quotes without escapes; then arguments where 2n
// backslashes before a quote are n and the quote opens or closes, 2n+1 are
// n and a literal quote, and other backslashes are themselves.
func splitCommandLine(s string) []string {
	var out []string
	r := []rune(s)
	i := 0
	var prog strings.Builder
	if i < len(r) && r[i] == '"' {
		i++
		for i < len(r) && r[i] != '"' {
			prog.WriteRune(r[i])
			i++
		}
		i++
	} else {
		for i < len(r) && r[i] != ' ' && r[i] != '\t' {
			prog.WriteRune(r[i])
			i++
		}
	}
	out = append(out, prog.String())
	for {
		for i < len(r) && (r[i] == ' ' || r[i] == '\t') {
			i++
		}
		if i >= len(r) {
			return out
		}
		var a strings.Builder
		quoted := false
		for i < len(r) && (quoted || (r[i] != ' ' && r[i] != '\t')) {
			n := 0
			for i < len(r) && r[i] == '\\' {
				n++
				i++
			}
			if i < len(r) && r[i] == '"' {
				a.WriteString(strings.Repeat(`\`, n/2))
				if n%2 == 1 {
					a.WriteRune('"')
				} else {
					quoted = !quoted
				}
				i++
				continue
			}
			a.WriteString(strings.Repeat(`\`, n))
			if i < len(r) && (quoted || (r[i] != ' ' && r[i] != '\t')) {
				a.WriteRune(r[i])
				i++
			}
		}
		out = append(out, a.String())
	}
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// The install medium carries the runner, and the first logon installs it
// with a scheduled task at every start.
func TestFirstLogonInstallsTaskRunner(t *testing.T) {
	files, err := Render(Config{Edition: Windows11, AdminPassword: "pw"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	runner, _ := TaskRunner(nil)
	if string(files[TaskRunnerFile]) != string(runner) {
		t.Error("Render's runner differs from TaskRunner's")
	}
	s := string(files[ScriptFile])
	for _, want := range []string{`Find-Drive 'gpuvm-task.ps1'`, `-TaskName 'gpuvm-task'`, `-AtStartup`, `-User 'SYSTEM'`, `C:\ProgramData\gpuvm\gpuvm-task.ps1`} {
		if !strings.Contains(s, want) {
			t.Errorf("the first logon lacks %q", want)
		}
	}
	if !regexp.MustCompile(`(?s)Step 'task runner'.*Step 'removing the cached answer file'`).MatchString(s) {
		t.Error("the task runner's step is not before the answer file's removal")
	}
}
