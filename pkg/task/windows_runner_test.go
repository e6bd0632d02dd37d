package task

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/windows"
)

// jsonName is the JSON name of Message's field f.
func jsonName(t *testing.T, f string) string {
	t.Helper()
	sf, ok := reflect.TypeOf(Message{}).FieldByName(f)
	if !ok {
		t.Fatalf("Message has no field %s", f)
	}
	return strings.Split(sf.Tag.Get("json"), ",")[0]
}

// The Windows runner (templates/windows/gpuvm-task.ps1.tmpl) is never run
// here; its words are read from the script and held to this package's: the
// types it sends and acts on, the fields of each, the version, the signals.
func TestWindowsRunnerSpeaksTheProtocol(t *testing.T) {
	b, err := windows.TaskRunner(nil)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if windows.TaskProtocol != Protocol {
		t.Errorf("the Windows runner speaks version %d, gpuvmd %d", windows.TaskProtocol, Protocol)
	}
	if !strings.Contains(s, fmt.Sprintf("$Protocol = %d\n", Protocol)) {
		t.Errorf("the script does not set $Protocol = %d", Protocol)
	}

	// What it sends: every "t" it writes (in PowerShell strings, and
	// escaped in the C# part's).
	sent := map[string]bool{}
	for _, m := range regexp.MustCompile(`\\?"t\\?":\\?"([a-z]+)\\?"`).FindAllStringSubmatch(s, -1) {
		sent[m[1]] = true
	}
	if got, want := keys(sent), sorted(GuestMessages); !slices.Equal(got, want) {
		t.Errorf("the runner sends %v, gpuvmd reads %v", got, want)
	}
	// Each with the fields gpuvmd reads, named as Message names them; v
	// is the $Protocol the script renders.
	q := func(f string) string { return jsonName(t, f) }
	for _, want := range []string{
		fmt.Sprintf(`'{"t":"%s","%s":' + $Protocol + ',"%s":"' + $id + '"}'`, MsgHello, q("V"), q("Task")),
		fmt.Sprintf(`'{"t":"%s","%s":' + $Protocol + '}'`, MsgHeartbeat, q("V")),
		fmt.Sprintf(`'{"t":"%s","%s":' + [int]$p + '}'`, MsgStart, q("Pid")),
		fmt.Sprintf(`"{\"t\":\"%s\",\"%s\":" + off + ",\"%s\":\""`, MsgOut, q("Off"), q("D")),
		fmt.Sprintf(`'{"t":"%s","%s":' + $Protocol + ',"%s":' + $off + '}'`, MsgResume, q("V"), q("Off")),
		fmt.Sprintf(`'{"t":"%s","%s":' + $st.Code + ',"%s":' + $st.Signal + ',"%s":' + $st.Size + '}'`, MsgExit, q("Code"), q("Signal"), q("Off")),
	} {
		if !strings.Contains(s, want) {
			t.Errorf("the runner does not send %s", want)
		}
	}

	// What it acts on: the cases of its switch over gpuvmd's "t", and the
	// fields it reads of them.
	i := strings.Index(s, "switch -CaseSensitive ([string]$m.t) {")
	if i < 0 {
		t.Fatal("no switch over gpuvmd's message types")
	}
	block := s[i:]
	block = block[:strings.Index(block, "\n    }\n")]
	read := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^      '([a-z]+)' \{`).FindAllStringSubmatch(block, -1) {
		read[m[1]] = true
	}
	if got, want := keys(read), sorted(HostMessages); !slices.Equal(got, want) {
		t.Errorf("the runner acts on %v, gpuvmd sends %v", got, want)
	}
	for _, f := range []string{"$m." + q("Off"), "$m." + q("Sig")} {
		if !strings.Contains(block, f) {
			t.Errorf("the runner does not read %s", f)
		}
	}

	// The signals: gpuvmd's TERM and KILL are carried out; every other
	// name a task may ask for is refused by the default case, and the
	// runner carries out no name gpuvmd never sends.
	j := strings.Index(s, "function Invoke-Signal")
	sig := s[j : j+strings.Index(s[j:], "\n}\n")]
	for _, w := range []string{fmt.Sprintf(`{ $_ -in '%s', 'INT' }`, SigTerm), fmt.Sprintf(`'%s' {`, SigKill), "default {"} {
		if !strings.Contains(sig, w) {
			t.Errorf("Invoke-Signal lacks %q", w)
		}
	}
	for _, n := range windows.TaskSignals {
		if n != SigKill && !slices.Contains(WarnSignals, n) {
			t.Errorf("the Windows runner carries out %s, which gpuvmd never sends", n)
		}
	}
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	sort.Strings(out)
	return out
}
