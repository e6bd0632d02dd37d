package backend

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

func TestPluginLoggerFormat(t *testing.T) {
	tests := []struct {
		level     slog.Level
		wantLevel string // "" when not logged
	}{
		{levelTrace, ""},
		{slog.LevelDebug, "debug"},
		{slog.LevelInfo, "info"},
		{slog.LevelInfo + 2, "info"},
		{slog.LevelWarn, "warn"},
		{slog.LevelError, "error"},
		{slog.LevelError + 4, "error"},
	}
	for _, tc := range tests {
		t.Run(tc.level.String(), func(t *testing.T) {
			var buf bytes.Buffer
			newPluginLogger(&buf).With("backend", "vgpu").WithGroup("gpu").
				Log(t.Context(), tc.level, "creating device", "address", "0000:41:00.0")
			if tc.wantLevel == "" {
				if buf.Len() != 0 {
					t.Errorf("logged %q, want nothing", buf.String())
				}
				return
			}
			var got map[string]any
			if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
				t.Fatalf("not one JSON line: %q: %v", buf.String(), err)
			}
			// go-plugin's host parses @timestamp with exactly this layout,
			// and gives up on the whole line when it fails.
			ts, _ := got["@timestamp"].(string)
			if _, err := time.Parse("2006-01-02T15:04:05.000000Z07:00", ts); err != nil {
				t.Errorf("@timestamp %q: %v", ts, err)
			}
			delete(got, "@timestamp")
			want := map[string]any{
				"@level":   tc.wantLevel,
				"@message": "creating device",
				"backend":  "vgpu",
				"gpu":      map[string]any{"address": "0000:41:00.0"},
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got %v, want %v", got, want)
			}
			if l := hclog.LevelFromString(tc.wantLevel); l == hclog.NoLevel {
				t.Errorf("hclog does not know level %q", tc.wantLevel)
			}
		})
	}
}

// logged runs f on an hclog.Logger over a JSON slog handler at level and
// returns what it logged.
func logged(t *testing.T, level slog.Level, f func(hclog.Logger)) []map[string]any {
	t.Helper()
	var buf bytes.Buffer
	f(NewHCLogger(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{
		Level: level,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey && len(groups) == 0 {
				return slog.Attr{}
			}
			return a
		},
	}))))
	var lines []map[string]any
	for line := range strings.Lines(buf.String()) {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, m)
	}
	return lines
}

func TestHCLogger(t *testing.T) {
	tests := []struct {
		name  string
		level slog.Level // of the slog handler
		log   func(hclog.Logger)
		want  []map[string]any
	}{
		{
			name:  "levels map to slog",
			level: levelTrace,
			log: func(l hclog.Logger) {
				l.Trace("t")
				l.Debug("d")
				l.Info("i")
				l.Warn("w")
				l.Error("e")
				l.Log(hclog.NoLevel, "n")
			},
			want: []map[string]any{
				{"level": "DEBUG-4", "msg": "t"}, {"level": "DEBUG", "msg": "d"}, {"level": "INFO", "msg": "i"},
				{"level": "WARN", "msg": "w"}, {"level": "ERROR", "msg": "e"}, {"level": "INFO", "msg": "n"},
			},
		},
		{
			name:  "handler level filters",
			level: slog.LevelWarn,
			log:   func(l hclog.Logger) { l.Debug("d"); l.Info("i"); l.Warn("w") },
			want:  []map[string]any{{"level": "WARN", "msg": "w"}},
		},
		{
			name:  "SetLevel overrides the handler's, for derived loggers too",
			level: levelTrace,
			log: func(l hclog.Logger) {
				c := l.Named("x")
				l.SetLevel(hclog.Error)
				c.Warn("w")
				c.Error("e")
			},
			want: []map[string]any{{"level": "ERROR", "msg": "e", "plugin": "x"}},
		},
		{
			name:  "Named and With add attributes",
			level: slog.LevelInfo,
			log: func(l hclog.Logger) {
				l.Named("gpuvm-backend-vgpu").With("pid", 42).Named("stdio").Info("hello", "k", "v")
				l.With("a", 1).ResetNamed("mig").Info("reset")
				l.Named("plain").With("b", 2) // derived loggers leave l alone
				l.Info("root")
			},
			want: []map[string]any{
				{"level": "INFO", "msg": "hello", "plugin": "gpuvm-backend-vgpu.stdio", "pid": 42.0, "k": "v"},
				{"level": "INFO", "msg": "reset", "plugin": "mig", "a": 1.0},
				{"level": "INFO", "msg": "root"},
			},
		},
		{
			name:  "standard logger infers levels",
			level: slog.LevelDebug,
			log: func(l hclog.Logger) {
				std := l.StandardLogger(&hclog.StandardLoggerOptions{InferLevels: true})
				std.Print("[WARN] disk almost full")
				std.Print("[DEBUG] detail")
				std.Print("no prefix")
				l.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Error}).Print("[INFO] forced")
			},
			want: []map[string]any{
				{"level": "WARN", "msg": "disk almost full"}, {"level": "DEBUG", "msg": "detail"},
				{"level": "INFO", "msg": "no prefix"}, {"level": "ERROR", "msg": "forced"},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := logged(t, tc.level, tc.log)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("logged\n%v\nwant\n%v", got, tc.want)
			}
		})
	}
}

func TestHCLoggerLevelGuards(t *testing.T) {
	tests := []struct {
		level                 slog.Level
		want                  hclog.Level
		trace, debug, info, e bool
	}{
		{levelTrace, hclog.Trace, true, true, true, true},
		{slog.LevelDebug, hclog.Debug, false, true, true, true},
		{slog.LevelInfo, hclog.Info, false, false, true, true},
		{slog.LevelError, hclog.Error, false, false, false, true},
		{slog.LevelError + 1, hclog.Off, false, false, false, false},
	}
	for _, tc := range tests {
		t.Run(tc.level.String(), func(t *testing.T) {
			l := NewHCLogger(slog.New(slog.NewTextHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: tc.level})))
			if got := l.GetLevel(); got != tc.want {
				t.Errorf("GetLevel() = %v, want %v", got, tc.want)
			}
			if l.IsTrace() != tc.trace || l.IsDebug() != tc.debug || l.IsInfo() != tc.info || l.IsError() != tc.e {
				t.Errorf("Is* = %v %v %v %v, want %v %v %v %v", l.IsTrace(), l.IsDebug(), l.IsInfo(), l.IsError(), tc.trace, tc.debug, tc.info, tc.e)
			}
		})
	}
}
