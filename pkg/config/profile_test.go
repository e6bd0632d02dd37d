package config

import (
	"bytes"

	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func render(t *testing.T, l *Loader, diags hcl.Diagnostics) string {
	t.Helper()
	var b bytes.Buffer
	if err := l.WriteDiagnostics(&b, diags, 100); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func allText(diags hcl.Diagnostics) string {
	var b strings.Builder
	for _, d := range diags {
		b.WriteString(d.Summary + ": " + d.Detail + "\n")
	}
	return b.String()
}

func golden(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./pkg/config -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("diagnostics differ from %s (run with -update if the change is intended)\n--- got ---\n%s", path, got)
	}
}

// TestDiagnosticsGolden loads every testdata/errors/*.hcl on its own and every
// testdata/dirs/*/ as a directory, and compares the rendered diagnostics with
// the .golden file beside it.
func TestDiagnosticsGolden(t *testing.T) {
	files, _ := filepath.Glob("testdata/errors/*.hcl")
	dirs, _ := filepath.Glob("testdata/dirs/*")
	if len(files) == 0 || len(dirs) == 0 {
		t.Fatal("no test inputs")
	}
	check := func(t *testing.T, cfg *Config, diags hcl.Diagnostics) {
		if len(diags) == 0 {
			t.Error("no diagnostics: a test input here should be wrong")
		}
		if diags.HasErrors() && cfg != nil {
			t.Error("Load returned a Config along with errors; it must be all or nothing")
		}
		if !diags.HasErrors() && cfg == nil {
			t.Error("Load returned no Config for warnings only")
		}
		for _, d := range diags {
			if d.Subject == nil {
				t.Errorf("diagnostic %q has no subject", d.Summary)
			}
		}
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			l := new(Loader)
			cfg, diags := l.LoadFiles(f)
			check(t, cfg, diags)
			golden(t, strings.TrimSuffix(f, ".hcl")+".golden", render(t, l, diags))
		})
	}
	for _, d := range dirs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			continue
		}
		t.Run(filepath.Base(d), func(t *testing.T) {
			l := new(Loader)
			cfg, diags := l.LoadDir(d)
			check(t, cfg, diags)
			golden(t, d+".golden", render(t, l, diags))
		})
	}
}

// TestConfigs loads every example configuration in configs/: each must be
// clean, with no error and no warning.
func TestConfigs(t *testing.T) {
	dirs, _ := filepath.Glob("../../configs/*")
	n := 0
	for _, d := range dirs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			continue
		}
		if files, _ := filepath.Glob(filepath.Join(d, "*.hcl")); len(files) == 0 {
			continue // not a configuration: configs/grafana holds a dashboard
		}
		n++
		t.Run(filepath.Base(d), func(t *testing.T) {
			l := new(Loader)
			cfg, diags := l.LoadDir(d)
			if len(diags) > 0 {
				t.Fatalf("configs/%s is not clean:\n%s", filepath.Base(d), render(t, l, diags))
			}
			if len(cfg.Profiles) == 0 {
				t.Error("no profiles")
			}
			for _, p := range cfg.Profiles {
				if p.Description == "" {
					t.Errorf("profile %s has no description", p.Name)
				}
			}
		})
	}
	for _, want := range []string{"dev", "lab", "startup", "studio"} {
		if _, err := os.Stat(filepath.Join("../../configs", want)); err != nil {
			t.Errorf("configs/%s: %v", want, err)
		}
	}
	if n == 0 {
		t.Fatal("no configs")
	}
}

func TestDevConfig(t *testing.T) {
	cfg, diags := Load("../../configs/dev")
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if cfg.Server.Host.Simulate != "h100x8" {
		t.Errorf("simulate = %q", cfg.Server.Host.Simulate)
	}
	tiny := cfg.Profiles["tiny"]
	if tiny == nil || tiny.Boot == nil || tiny.GPU != nil || tiny.Disk != nil {
		t.Fatalf("tiny = %+v", tiny)
	}
	if !filepath.IsAbs(tiny.Boot.Kernel) || !strings.HasSuffix(tiny.Boot.Kernel, "test/guest/cache/vmlinuz") {
		t.Errorf("kernel = %q, want an absolute path ending in test/guest/cache/vmlinuz", tiny.Boot.Kernel)
	}
	if g := cfg.Profiles["tiny-mig"].GPU; g == nil || g.Kind != gpu.KindMIG || g.Profile != "1g.10gb" || g.Memory != 10<<30 {
		t.Errorf("tiny-mig gpu = %+v", g)
	}
	if g := cfg.Profiles["tiny-vgpu"].GPU; g == nil || g.Kind != gpu.KindVGPU || g.Type != "H100-4C" || g.Memory != 4<<30 {
		t.Errorf("tiny-vgpu gpu = %+v", g)
	}
	if !strings.HasSuffix(cfg.Server.StateDir, ".cache/run") || !filepath.IsAbs(cfg.Server.StateDir) {
		t.Errorf("state_dir = %q", cfg.Server.StateDir)
	}
	if cfg.Server.Database.Path != filepath.Join(cfg.Server.StateDir, "gpuvm.db") {
		t.Errorf("database path = %q", cfg.Server.Database.Path)
	}
	// gpuvmd makes the pool of VM seeds where QEMU can read it: under
	// /var/lib, never in the checkout (which may be a private home).
	if l := cfg.Server.Libvirt; l.StoragePool != "gpuvm-dev" || l.StoragePoolDir != "/var/lib/libvirt/images/gpuvm-dev" {
		t.Errorf("storage pool %q at %q", l.StoragePool, l.StoragePoolDir)
	}
	s := cfg.Server.Host.Settings("0000:5d:00.0", mustModel(t, "H100 PCIe 80GB"))
	if s.Mode != gpu.ModeMIG || len(s.MIGLayout) != 4 {
		t.Errorf("settings of 0000:5d:00.0 = %+v", s)
	}
	if s := cfg.Server.Host.Settings("0000:99:00.0", mustModel(t, "H100 PCIe 80GB")); s.Mode != gpu.ModeAuto {
		t.Errorf("settings of an unnamed GPU = %+v", s)
	}
}

func TestDefaults(t *testing.T) {
	cfg, diags := Parse(Source{Name: "p.hcl", Data: []byte(`
image "u" {
  volume = "u.qcow2"
}
profile "p" {
  description = "d"
  disk { image = "u" }
}`)})
	if len(diags) > 0 {
		t.Fatal(diags)
	}
	p := cfg.Profiles["p"]
	want := Profile{VCPUs: 2, Memory: 4 << 30, Firmware: "uefi", OS: "linux", Class: ClassInteractive,
		Lease: Lease{Default: 8 * time.Hour, Max: 24 * time.Hour, WarnBefore: 30 * time.Minute, OnEnd: LeaseEndStop, Grace: 24 * time.Hour}}
	if p.VCPUs != want.VCPUs || p.Memory != want.Memory || p.Firmware != want.Firmware || p.OS != want.OS ||
		p.Class != want.Class || p.Lease != want.Lease || p.Network.Type != "network" || p.Network.Source != "default" ||
		p.Display.Type != "vnc" || !p.Open() {
		t.Errorf("defaults: %+v", p)
	}
	s := cfg.Server
	if s.Listen != DefaultListen || s.StateDir != DefaultStateDir || s.Database.Driver != "sqlite" ||
		s.Database.Path != "/var/lib/gpuvm/gpuvm.db" || s.Libvirt.URI != DefaultLibvirtURI ||
		s.Libvirt.ImagesDir != "/var/lib/gpuvm/images" || s.Libvirt.StoragePoolDir != "/var/lib/libvirt/images/gpuvm" ||
		len(s.Plugins.Backends) != 3 {
		t.Errorf("server defaults: %+v", s)
	}
	if img := cfg.Images["u"]; img.Pool != DefaultStoragePool || img.Format != "qcow2" {
		t.Errorf("image defaults: %+v", img)
	}
	if cfg.Policy.Queue.Order != OrderFIFO || cfg.Policy.Reservations != nil {
		t.Errorf("policy defaults: %+v", cfg.Policy)
	}
}

// storage_pool_dir defaults to the pool's name under libvirt's images
// directory; a relative one is relative to its file, which text that is
// not a file (the API's) does not have.
func TestStoragePoolDir(t *testing.T) {
	for _, tc := range []struct{ name, block, want, err string }{
		{name: "default", block: `storage_pool = "p1"`, want: "/var/lib/libvirt/images/p1"},
		{name: "absolute", block: `storage_pool_dir = "/srv/pools/p//"`, want: "/srv/pools/p"},
		{name: "relative, not a file", block: `storage_pool_dir = "pools/p"`, err: `"pools/p" is not a directory for a storage pool`},
		{name: "root", block: `storage_pool_dir = "/"`, err: "Invalid storage_pool_dir"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, diags := Parse(Source{Name: "server.hcl", Data: []byte("server {\n  libvirt {\n    " + tc.block + "\n  }\n}\n")})
			if tc.err != "" {
				if !strings.Contains(allText(diags), tc.err) {
					t.Fatalf("diagnostics %q, want %q", allText(diags), tc.err)
				}
				return
			}
			if diags.HasErrors() {
				t.Fatal(diags)
			}
			if got := cfg.Server.Libvirt.StoragePoolDir; got != tc.want {
				t.Errorf("storage_pool_dir = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestAllOrNothing(t *testing.T) {
	good := Source{Name: "a.hcl", Data: []byte(`profile "a" {
  boot { kernel = "/k" }
}`)}
	bad := Source{Name: "b.hcl", Data: []byte(`profile "b" {
  boot { kernel = "/k" }
  memory = "lots"
}`)}
	if cfg, diags := Parse(good, bad); cfg != nil || !diags.HasErrors() {
		t.Errorf("one bad file: cfg=%v diags=%v", cfg, diags)
	}
	if cfg, diags := Parse(good); cfg == nil || diags.HasErrors() {
		t.Errorf("good file: %v", diags)
	}
}

func TestUntrusted(t *testing.T) {
	src := Source{Name: "api", Data: []byte(`
server { allow_functions = ["env", "file"] }
template "t" { file = "/etc/passwd" }
profile "p" {
  description = env("HOME")
  boot { kernel = file("/etc/hostname") }
}`)}
	_, diags := Parse(src)
	out := allText(diags)
	for _, want := range []string{"env() reads the environment, which only configuration files on disk may do",
		"file() reads a file, which only configuration files on disk may do", "Template files not allowed here"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
}

func TestGatedFunctions(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "motd.txt"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	write := func(allow string) string {
		p := filepath.Join(dir, "gpuvm.hcl")
		text := `server {
  ` + allow + `
  database {
    driver = "postgres"
    dsn    = "postgres://gpuvm:${env("DBPASS")}@db/gpuvm"
  }
}
profile "p" {
  description = file("motd.txt")
  boot { kernel = "/k" }
}`
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	l := &Loader{Getenv: func(k string) string { return map[string]string{"DBPASS": "s3cret"}[k] }}
	cfg, diags := l.LoadFiles(write(`allow_functions = ["env", "file"]`))
	if len(diags) > 0 {
		t.Fatal(render(t, l, diags))
	}
	if cfg.Server.Database.DSN != "postgres://gpuvm:s3cret@db/gpuvm" || cfg.Profiles["p"].Description != "hello" {
		t.Errorf("dsn %q, description %q", cfg.Server.Database.DSN, cfg.Profiles["p"].Description)
	}
	l = &Loader{Getenv: func(string) string { t.Error("env read without opt-in"); return "" }}
	_, diags = l.LoadFiles(write(`allow_functions = ["file"]`))
	if out := allText(diags); !strings.Contains(out, `add "env" to server { allow_functions`) || strings.Contains(out, "motd") {
		t.Errorf("env without opt-in:\n%s", out)
	}
}

func TestBoundedWork(t *testing.T) {
	// Each replace multiplies the text by 8: without a budget this is 8^12
	// bytes.
	expr := `"aaaaaaaa"`
	for i := 0; i < 12; i++ {
		expr = `replace(` + expr + `, "a", "aaaaaaaa")`
	}
	join := `"x"`
	for i := 0; i < 40; i++ {
		join = `join("", [` + join + `, ` + join[:0] + `"y"])`
	}
	cases := map[string]string{
		"replace":    `profile "p" { description = ` + expr + ` }`,
		"format":     `profile "p" { description = format("%.999999999f", 1) }`,
		"for":        `profile "p" { users = [for a in ["a","b"] : [for b in ["c"] : b]] }`,
		"nesting":    `profile "p" { description = ` + strings.Repeat("(", 5000) + `1` + strings.Repeat(")", 5000) + ` }`,
		"interp":     `profile "p" { description = ` + strings.Repeat(`"${`, 5000) + `1` + strings.Repeat(`}"`, 5000) + ` }`,
		"unary":      `profile "p" { vcpus = ` + strings.Repeat("-", 200000) + `1 }`,
		"conditions": `profile "p" { vcpus = ` + strings.Repeat("true ? 1 : ", 100000) + `1 }`,
		"large":      `profile "p" { description = "` + strings.Repeat("x", MaxFileBytes) + `" }`,
	}
	for name, text := range cases {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			cfg, diags := Parse(Source{Name: name + ".hcl", Data: []byte(text)})
			if cfg != nil || !diags.HasErrors() {
				t.Errorf("accepted")
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
	_ = join
}

func TestTooManyItems(t *testing.T) {
	var b strings.Builder
	for i := 0; i < MaxItems/2+10; i++ {
		b.WriteString("image \"i\" {\n  path = \"x\"\n}\n")
	}
	_, diags := Parse(Source{Name: "many.hcl", Data: []byte(b.String())})
	if !diags.HasErrors() || !strings.Contains(diags.Error(), "at most") {
		t.Errorf("got %v", diags)
	}
}

func TestRenderCloudInit(t *testing.T) {
	cfg, diags := Parse(Source{Name: "t.hcl", Data: []byte(`
template "dev" {
  content = <<EOT
#cloud-config
hostname: ${hostname}
users:
  - name: ${upper(user)}
    ssh_authorized_keys:
%{ for k in ssh_authorized_keys ~}
      - ${k}
%{ endfor ~}
packages: ${join(", ", packages)}
motd: ${motd}
EOT
  vars = {
    packages = ["git"]
    motd     = "hi"
  }
}
profile "p" {
  boot { kernel = "/k" }
  cloud_init {
    template = "dev"
    vars = { packages = ["git", "vim"] }
  }
}`)})
	if len(diags) > 0 {
		t.Fatal(diags)
	}
	got, err := cfg.RenderCloudInit(cfg.Profiles["p"], CloudInitInput{User: "ada", Hostname: "vm1", SSHAuthorizedKeys: []string{"ssh-ed25519 AAA", "ssh-rsa BBB"}})
	if err != nil {
		t.Fatal(err)
	}
	want := "#cloud-config\nhostname: vm1\nusers:\n  - name: ADA\n    ssh_authorized_keys:\n      - ssh-ed25519 AAA\n      - ssh-rsa BBB\npackages: git, vim\nmotd: hi\n"
	if got != want {
		t.Errorf("rendered:\n%s\nwant:\n%s", got, want)
	}
	if string(cfg.Profiles["p"].CloudInit.Vars) != `{"packages":["git","vim"]}` {
		t.Errorf("vars JSON = %s", cfg.Profiles["p"].CloudInit.Vars)
	}
}

func TestTemplateFile(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "templates"), 0o755)
	os.WriteFile(filepath.Join(dir, "templates", "seed.yaml"), []byte("#cloud-config\nhostname: ${hostname}\nbad: ${nope}\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "a.hcl"), []byte("template \"seed\" {\n  file = \"templates/seed.yaml\"\n}\n"), 0o644)
	l := new(Loader)
	_, diags := l.LoadDir(dir)
	out := render(t, l, diags)
	if !strings.Contains(out, filepath.Join(dir, "templates", "seed.yaml")+":3:8") || !strings.Contains(out, `uses "nope"`) || !strings.Contains(out, "^^^^") {
		t.Errorf("an error inside a template file should point into it:\n%s", out)
	}
}

func TestWindows(t *testing.T) {
	cfg, diags := Load("../../configs/startup")
	if len(diags) > 0 {
		t.Fatal(diags)
	}
	pol := &cfg.Policy
	loc := pol.Location
	at := func(s string) time.Time {
		tm, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	tests := []struct {
		when, class string
		ok          bool
		window      string
	}{
		{"2026-03-02 10:00", ClassInteractive, true, "day"}, // Monday
		{"2026-03-02 10:00", ClassBatch, false, "day"},
		{"2026-03-02 20:00", ClassBatch, true, "night"},
		{"2026-03-03 03:00", ClassInteractive, false, "night"}, // Tuesday small hours
		{"2026-03-06 19:00", ClassBatch, true, "weekend"},      // Friday evening
		{"2026-03-08 12:00", ClassBatch, true, "weekend"},      // Sunday
		{"2026-03-09 08:59", ClassBatch, true, "weekend"},      // Monday before nine
		{"2026-03-09 09:00", ClassBatch, false, "day"},
	}
	for _, tc := range tests {
		ok, w := pol.MayStart(tc.class, at(tc.when))
		name := ""
		if w != nil {
			name = w.Name
		}
		if ok != tc.ok || name != tc.window {
			t.Errorf("%s %s: ok=%v in %q, want ok=%v in %q", tc.when, tc.class, ok, name, tc.ok, tc.window)
		}
	}
}

// What happens at a lease's end resolves with its defaults: a grace only
// for on_end = "stop", warn_before "0" turns warnings off.
func TestLeaseEnd(t *testing.T) {
	tests := []struct {
		lease string
		want  Lease
	}{
		{``, Lease{Default: 8 * time.Hour, Max: 24 * time.Hour, WarnBefore: 30 * time.Minute, OnEnd: LeaseEndStop, Grace: 24 * time.Hour}},
		{`warn_before = "1h"
    grace = "2h"`, Lease{Default: 8 * time.Hour, Max: 24 * time.Hour, WarnBefore: time.Hour, OnEnd: LeaseEndStop, Grace: 2 * time.Hour}},
		{`on_end = "delete"`, Lease{Default: 8 * time.Hour, Max: 24 * time.Hour, WarnBefore: 30 * time.Minute, OnEnd: LeaseEndDelete}},
		{`on_end = "keep"
    warn_before = "0"`, Lease{Default: 8 * time.Hour, Max: 24 * time.Hour, OnEnd: LeaseEndKeep}},
	}
	for _, tc := range tests {
		cfg, diags := Parse(Source{Name: "p.hcl", Data: []byte(`
profile "p" {
  boot { kernel = "/boot/vmlinuz" }
  lease {
    ` + tc.lease + `
  }
}
policy {
  webhook = "https://hooks.example.com/notices"
}`)})
		if len(diags) > 0 {
			t.Fatalf("%s: %v", tc.lease, diags)
		}
		if got := cfg.Profiles["p"].Lease; got != tc.want {
			t.Errorf("%s: %+v, want %+v", tc.lease, got, tc.want)
		}
		if cfg.Policy.Webhook != "https://hooks.example.com/notices" {
			t.Errorf("policy webhook %q", cfg.Policy.Webhook)
		}
	}
}

func TestUnits(t *testing.T) {
	sizes := map[string]uint64{"32GiB": 32 << 30, "512MiB": 512 << 20, "1.5TiB": 3 << 39, "1 GiB": 1 << 30, "4096B": 4096, "0.5kib": 512}
	for in, want := range sizes {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "32", "32GB", "32G", "lots", "-1GiB", "0.3B", "1e3GiB", "99999999999999999999TiB"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) accepted", bad)
		}
	}
	for b, want := range map[uint64]string{32 << 30: "32GiB", 3 << 39: "1.5TiB", 256 << 20: "256MiB", 1000: "1000B", 0: "0B"} {
		if got := FormatSize(b); got != want {
			t.Errorf("FormatSize(%d) = %q, want %q", b, got, want)
		}
	}
	durs := map[string]time.Duration{"8h": 8 * time.Hour, "90m": 90 * time.Minute, "3d": 72 * time.Hour, "1h30m": 90 * time.Minute, "2w": 14 * 24 * time.Hour, "0": 0, "45s": 45 * time.Second}
	for in, want := range durs {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
		if got := FormatDuration(want); in != "90m" && in != "1h30m" && got != in {
			t.Errorf("FormatDuration(%v) = %q, want %q", want, got, in)
		}
	}
	for _, bad := range []string{"", "8", "8hours", "1h30", "h", "1.5h", "1h1h", "99999999999h", "-1h"} {
		if _, err := ParseDuration(bad); err == nil {
			t.Errorf("ParseDuration(%q) accepted", bad)
		}
	}
	days := map[string]string{"mon-fri": "1111100", "sat,sun": "0000011", "fri-mon": "1000111", "daily": "1111111", "Monday,wed": "1010000"}
	for in, want := range days {
		d, err := ParseDays(in)
		got := ""
		for _, x := range d {
			got += map[bool]string{true: "1", false: "0"}[x]
		}
		if err != nil || got != want {
			t.Errorf("ParseDays(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "mon-fry", "mon,mon", "weekdays"} {
		if _, err := ParseDays(bad); err == nil {
			t.Errorf("ParseDays(%q) accepted", bad)
		}
	}
	hours := map[string][2]int{"09:00-18:00": {540, 540}, "18:00-09:00": {1080, 900}, "00:00-24:00": {0, 1440}, "9:30-10:00": {570, 30}}
	for in, want := range hours {
		s, l, err := ParseHours(in)
		if err != nil || s != want[0] || l != want[1] {
			t.Errorf("ParseHours(%q) = %d, %d, %v; want %v", in, s, l, err, want)
		}
	}
	for _, bad := range []string{"09:00", "09:00-09:00", "24:00-01:00", "9-17", "09:60-10:00"} {
		if _, _, err := ParseHours(bad); err == nil {
			t.Errorf("ParseHours(%q) accepted", bad)
		}
	}
}

func TestLayoutFits(t *testing.T) {
	h100 := mustModel(t, "H100 PCIe 80GB")
	for _, ok := range [][]string{
		{"3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"}, // needs the 3g at slot 4
		{"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"},
		{"7g.80gb"},
		{"4g.40gb", "2g.20gb", "1g.10gb"},
	} {
		if err := layoutFits(h100, ok); err != nil {
			t.Errorf("%v: %v", ok, err)
		}
	}
	for _, bad := range [][]string{{"4g.40gb", "3g.40gb", "1g.10gb"}, {"7g.80gb", "1g.10gb"}, {"3g.40gb", "3g.40gb", "1g.10gb"}} {
		if err := layoutFits(h100, bad); err == nil {
			t.Errorf("%v fits?", bad)
		}
	}
}

func TestListDirErrors(t *testing.T) {
	if _, diags := Load(filepath.Join(t.TempDir(), "missing")); !diags.HasErrors() {
		t.Error("missing dir accepted")
	}
	if _, diags := Load(t.TempDir()); !diags.HasErrors() || !strings.Contains(diags.Error(), "no *.hcl") {
		t.Errorf("empty dir: %v", diags)
	}
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "big.hcl"), bytes.Repeat([]byte("#"), MaxFileBytes+1), 0o644)
	if _, diags := Load(dir); !diags.HasErrors() {
		t.Error("big file accepted")
	}
}

func mustModel(t *testing.T, name string) gpu.Model {
	t.Helper()
	m, err := exactModel(name)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestEffectivePolicy(t *testing.T) {
	cfg, diags := Load("../../configs/lab")
	if len(diags) > 0 {
		t.Fatal(diags)
	}
	pol := &cfg.Policy
	st := pol.Effective("sam", []string{"students", "ml101"})
	if st.Priority != 0 || st.Preemptible || *st.Quota.VMs != 1 || st.Quota.GPUHoursPerWeek != nil {
		// ml101 has no weekly budget: the looser limit is none; ml101 is not preemptible.
		t.Errorf("student in ml101: %+v", st)
	}
	if s := pol.Effective("sam", []string{"students"}); !s.Preemptible || *s.Quota.GPUHoursPerWeek != 10 {
		t.Errorf("student: %+v", s)
	}
	if s := pol.Effective("prof", []string{"staff", "students"}); s.Priority != 100 || *s.Quota.VMs != 3 {
		t.Errorf("staff: %+v", s)
	}
	if s := pol.Effective("visitor", nil); *s.Quota.VMs != 0 {
		t.Errorf("defaults: %+v", s)
	}
	// Snapshots: a group without a block has the defaults'; the most
	// generous of several groups wins, and the rule names them.
	snaps := func(user string, groups ...string) (int, time.Duration, string) {
		s := pol.Effective(user, groups).Snapshots
		if s.Keep == nil || s.ExpireAfter == nil {
			t.Fatalf("%s %v: no snapshot limits: %+v", user, groups, s)
		}
		return *s.Keep, *s.ExpireAfter, s.Rule
	}
	if k, e, r := snaps("sam", "students"); k != 2 || e != 7*24*time.Hour || r != "policy group students" {
		t.Errorf("student's snapshots: %d %s %q", k, e, r)
	}
	if k, e, r := snaps("visitor"); k != 5 || e != 30*24*time.Hour || r != "policy defaults" {
		t.Errorf("defaults' snapshots: %d %s %q", k, e, r)
	}
	if k, _, r := snaps("sam", "students", "staff"); k != 5 || !strings.Contains(r, "students, staff") {
		t.Errorf("student and staff's snapshots: %d %q", k, r)
	}
	// Storage limits, the same way.
	const gib = 1 << 30
	store := func(user string, groups ...string) (uint64, uint64, string) {
		s := pol.Effective(user, groups).Storage
		if s.HomeQuota == nil || s.DiskQuota == nil {
			t.Fatalf("%s %v: no storage limits: %+v", user, groups, s)
		}
		return *s.HomeQuota, *s.DiskQuota, s.Rule
	}
	if h, d, r := store("sam", "students"); h != 10*gib || d != 20*gib || r != "policy group students" {
		t.Errorf("student's storage: %d %d %q", h, d, r)
	}
	if h, d, r := store("visitor"); h != 50*gib || d != 200*gib || r != "policy defaults" {
		t.Errorf("defaults' storage: %d %d %q", h, d, r)
	}
	if h, _, r := store("sam", "students", "staff"); h != 50*gib || !strings.Contains(r, "students, staff") {
		t.Errorf("student and staff's storage: %d %q", h, r)
	}
}

func TestStorageLimitsErrors(t *testing.T) {
	for _, tc := range []struct{ name, block, want string }{
		{"zero", `home_quota = "0GiB"`, "Invalid home_quota"},
		{"negative", `disk_quota = "-5GiB"`, "Invalid size"},
		{"words", `home_quota = "lots"`, "Invalid size"},
		{"unknown", `share_quota = "1GiB"`, "Unsupported argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "policy {\n defaults {\n  storage {\n   " + tc.block + "\n  }\n }\n}\n"
			_, diags := Parse(Source{Name: "policy.hcl", Data: []byte(src)})
			for _, d := range diags {
				if strings.Contains(d.Summary, tc.want) {
					if d.Subject == nil || d.Subject.Start.Line != 4 {
						t.Errorf("%q points at %v, want policy.hcl:4", d.Summary, d.Subject)
					}
					return
				}
			}
			t.Errorf("%s: %v, want %q", tc.block, diags, tc.want)
		})
	}
}

func TestManyBlocksStayFast(t *testing.T) {
	var b strings.Builder
	b.WriteString("server {\n host {\n")
	for i := 0; i < 200; i++ {
		b.WriteString(`  gpu "0000:` + strings.Repeat("0", 0) + hex2(i) + `:00.0" { mode = "auto" }` + "\n")
	}
	b.WriteString(" }\n}\npolicy {\n timezone = \"UTC\"\n")
	for i := 0; i < 300; i++ {
		b.WriteString(`  window "w` + hex2(i%256) + `" { days = "mon" hours = "09:00-10:00" classes = [] }` + "\n")
	}
	b.WriteString("}\n")
	for i := 0; i < 1100; i++ {
		b.WriteString(`profile "p` + strings.Repeat("x", i%50) + hex2(i%256) + `" {
  boot { kernel = "/k" }
  gpu { memory = "1GiB" }
}
`)
	}
	start := time.Now()
	_, diags := Parse(Source{Name: "many.hcl", Data: []byte(b.String())})
	if !diags.HasErrors() {
		t.Error("accepted")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v", d)
	}
}

func hex2(i int) string {
	return string("0123456789abcdef"[i/16%16]) + string("0123456789abcdef"[i%16])
}
