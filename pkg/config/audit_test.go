package config

import (
	"encoding/json"
	"testing"
	"time"
)

func TestAuditBlock(t *testing.T) {
	def := Audit{Retention: 400 * 24 * time.Hour, Log: true}
	for _, tc := range []struct {
		name, hcl string
		want      Audit
		err       string // a diagnostic's summary; "" for none
		line      int    // the line it points at
	}{
		{"no server block", ``, def, "", 0},
		{"no audit block", `server {}`, def, "", 0},
		{"empty block", "server {\n audit {}\n}", def, "", 0},
		{"all set", "server {\n audit {\n retention = \"2w\"\n log = false\n }\n}", Audit{Retention: 14 * 24 * time.Hour}, "", 0},
		{"forever", "server {\n audit {\n retention = \"0\"\n }\n}", Audit{Log: true}, "", 0},
		{"one day", "server {\n audit {\n retention = \"1d\"\n }\n}", Audit{Retention: 24 * time.Hour, Log: true}, "", 0},
		{"too short", "server {\n audit {\n log = true\n retention = \"12h\"\n }\n}", Audit{}, "Invalid retention", 4},
		{"bad duration", "server {\n audit {\n retention = \"a year\"\n }\n}", Audit{}, "Invalid duration", 3},
		{"log not a bool", "server {\n audit {\n log = \"loud\"\n }\n}", Audit{}, "Unsuitable value type", 3},
		{"unknown attribute", "server {\n audit {\n keep = \"1y\"\n }\n}", Audit{}, "Unsupported argument", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkBlock(t, tc.hcl, tc.err, tc.line, tc.want, func(c *Config) Audit { return c.Server.Audit })
		})
	}
}

func TestAuditJSON(t *testing.T) {
	b, err := json.Marshal(Audit{Retention: 400 * 24 * time.Hour, Log: true})
	if err != nil || string(b) != `{"log":true,"retention":34560000}` {
		t.Errorf("%s, %v", b, err)
	}
}
