package cloudinit

import (
	"bytes"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"
	"unicode/utf16"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

var fixed = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func testConfig() Config {
	return Config{
		InstanceID:   "6f1d8a4e-2b7c-4e0a-9d3f-5a6b7c8d9e01",
		Hostname:     "render-alice-1",
		User:         "alice",
		SSHKeys:      []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKq0 alice@laptop"},
		PasswordHash: "$6$rounds=4096$saltsalt$JzQ9vW1kVxg0Q.Yz/abcdefghijklmnop",
		VMID:         "vm-42",
		Owner:        `Alice "Ally" O'Neil: admin`,
	}
}

func TestRenderGolden(t *testing.T) {
	files, err := Render(testConfig(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range Files {
		path := filepath.Join("testdata", name+".golden")
		if *update {
			if err := os.MkdirAll("testdata", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, files[name], 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go test -update creates it)", err)
		}
		if !bytes.Equal(files[name], want) {
			t.Errorf("%s differs (go test -update rewrites it):\n%s", path, files[name])
		}
	}
}

func TestRenderQuotesUserText(t *testing.T) {
	c := testConfig()
	c.Owner = "x\"\nruncmd: [rm -rf /]" // a control character: refused
	if _, err := Render(c, nil); err == nil || !strings.Contains(err.Error(), "owner") {
		t.Fatalf("owner with a newline: err = %v", err)
	}
	c = testConfig()
	c.Owner = `bob", "groups": "root` // quotes stay inside the string
	files, err := Render(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(files["user-data"]), `gecos: "gpuvm user bob\", \"groups\": \"root"`) {
		t.Errorf("owner not quoted:\n%s", files["user-data"])
	}
	c = testConfig()
	c.PasswordHash, c.SSHKeys = "", nil
	files, err = Render(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	ud := string(files["user-data"])
	if !strings.Contains(ud, "lock_passwd: true") || strings.Contains(ud, "ssh_authorized_keys") || !strings.Contains(ud, "ssh_pwauth: false") {
		t.Errorf("no password and no key:\n%s", ud)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		want   string
	}{
		{"valid", func(*Config) {}, ""},
		{"no instance id", func(c *Config) { c.InstanceID = "" }, "instance id"},
		{"hostname underscore", func(c *Config) { c.Hostname = "my_host" }, "hostname"},
		{"hostname newline", func(c *Config) { c.Hostname = "a\nb" }, "hostname"},
		{"hostname dotted", func(c *Config) { c.Hostname = "vm1.lab.example.com" }, ""},
		{"hostname leading dash", func(c *Config) { c.Hostname = "-vm" }, "hostname"},
		{"user upper", func(c *Config) { c.User = "Alice" }, "user"},
		{"user root", func(c *Config) { c.User = "root" }, "reserved"},
		{"user long", func(c *Config) { c.User = strings.Repeat("a", 33) }, "user"},
		{"key two lines", func(c *Config) { c.SSHKeys = []string{"ssh-rsa AAAA x\nssh-rsa BBBB y"} }, "ssh key 1"},
		{"key garbage", func(c *Config) { c.SSHKeys = []string{"hello"} }, "ssh key 1"},
		{"key ecdsa", func(c *Config) { c.SSHKeys = []string{"ecdsa-sha2-nistp256 AAAAE2Vj"} }, ""},
		{"clear password", func(c *Config) { c.PasswordHash = "hunter2" }, "password hash"},
		{"hash with colon", func(c *Config) { c.PasswordHash = "$6$abc:def$ghijklmnop" }, "password hash"},
		{"yescrypt", func(c *Config) {
			c.PasswordHash = "$y$j9T$F5Jx5fExrKuPp53xLKQ..1$X3DX6M94c7o.9agCG9G317fhZg9SqC.5i5rd.RhAtQ7"
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testConfig()
			tt.change(&c)
			err := c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
}

func TestRenderProfileUserData(t *testing.T) {
	c := testConfig()
	c.UserData = "#cloud-config\npackages: [git]\n"
	files, err := Render(c, nil)
	if err != nil {
		t.Fatal(err)
	}
	if string(files["user-data"]) != c.UserData {
		t.Errorf("user-data = %q", files["user-data"])
	}
	if !strings.Contains(string(files["meta-data"]), `local-hostname: "render-alice-1"`) {
		t.Errorf("meta-data = %q", files["meta-data"])
	}
	c.UserData = "packages: [git]\n"
	if _, err := Render(c, nil); err == nil || !strings.Contains(err.Error(), "user-data") {
		t.Errorf("user-data without a header: %v", err)
	}
}

func TestRenderOverride(t *testing.T) {
	over := fstest.MapFS{
		"meta-data.tmpl": {Data: []byte("instance-id: {{ yaml .InstanceID }}\nlocal-hostname: {{ yaml .Hostname }}\n# site override\n")},
	}
	files, err := Render(testConfig(), over)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(files["meta-data"]), "# site override") {
		t.Errorf("override not used: %s", files["meta-data"])
	}
	if !strings.HasPrefix(string(files["user-data"]), "#cloud-config\n") {
		t.Errorf("missing template not taken from the built-in ones")
	}

	bad := []struct {
		name string
		fs   fstest.MapFS
		want string
	}{
		{"syntax", fstest.MapFS{"meta-data.tmpl": {Data: []byte("{{ .Hostname ")}}, "meta-data.tmpl"},
		{"unknown field", fstest.MapFS{"meta-data.tmpl": {Data: []byte("{{ .Nope }}")}}, "meta-data.tmpl"},
		{"no cloud-config", fstest.MapFS{"user-data.tmpl": {Data: []byte("users: []\n")}}, "#cloud-config"},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			if _, err := Render(testConfig(), b.fs); err == nil || !strings.Contains(err.Error(), b.want) {
				t.Errorf("err = %v, want it to mention %q", err, b.want)
			}
		})
	}
}

// isoReader reads back what ISO writes, following ECMA-119 by hand.
type isoReader struct {
	t   *testing.T
	img []byte
}

func (r isoReader) sector(n uint32) []byte { return r.img[int(n)*sector : int(n+1)*sector] }

type isoEntry struct {
	id        []byte
	extent    uint32
	size      uint32
	dir       bool
	systemUse []byte
}

func (r isoReader) dir(extent, size uint32) []isoEntry {
	var out []isoEntry
	data := r.img[int(extent)*sector : int(extent)*sector+int(size)]
	for off := 0; off < len(data); {
		n := int(data[off])
		if n == 0 { // rest of the sector is padding
			off = (off/sector + 1) * sector
			continue
		}
		rec := data[off : off+n]
		if le, be := binary.LittleEndian.Uint32(rec[2:]), binary.BigEndian.Uint32(rec[6:]); le != be {
			r.t.Errorf("extent %d/%d not both-endian", le, be)
		}
		idLen := int(rec[32])
		su := 33 + idLen
		if idLen%2 == 0 {
			su++
		}
		out = append(out, isoEntry{
			id: rec[33 : 33+idLen], extent: binary.LittleEndian.Uint32(rec[2:]), size: binary.LittleEndian.Uint32(rec[10:]),
			dir: rec[25]&2 != 0, systemUse: rec[su:],
		})
		off += n
	}
	return out
}

// susp returns the SUSP entries of a system use field by signature.
func susp(su []byte) map[string][]byte {
	out := map[string][]byte{}
	for len(su) >= 4 && su[2] >= 4 && int(su[2]) <= len(su) {
		out[string(su[:2])] = su[:su[2]]
		su = su[su[2]:]
	}
	return out
}

func TestISO(t *testing.T) {
	files := []File{
		{Name: "user-data", Data: []byte("#cloud-config\nhostname: x\n")},
		{Name: "meta-data", Data: []byte("instance-id: i\nlocal-hostname: x\n")},
		{Name: "network-config", Data: bytes.Repeat([]byte("#"), 5000)}, // three sectors
		{Name: "empty", Data: nil},
	}
	img, err := ISO(Label, files, fixed)
	if err != nil {
		t.Fatal(err)
	}
	if len(img)%sector != 0 {
		t.Fatalf("image size %d is not whole sectors", len(img))
	}
	// busybox's volume_id (findfs LABEL=cidata in the tiny guest) reads
	// 0x11000 bytes before it probes for ISO 9660.
	if len(img) < 0x11000 {
		t.Errorf("image of %d bytes: smaller than the 0x11000 bytes busybox's findfs reads", len(img))
	}
	r := isoReader{t: t, img: img}
	pvd, svd, term := r.sector(16), r.sector(17), r.sector(18)
	if pvd[0] != 1 || string(pvd[1:6]) != "CD001" || svd[0] != 2 || term[0] != 255 {
		t.Fatalf("volume descriptors: %d %q %d %d", pvd[0], pvd[1:6], svd[0], term[0])
	}
	if got := strings.TrimRight(string(pvd[40:72]), " "); got != Label {
		t.Errorf("primary volume id %q", got)
	}
	if string(svd[88:91]) != "%/E" {
		t.Errorf("no Joliet escape sequence: %q", svd[88:91])
	}
	if got := strings.TrimRight(decodeUCS2(svd[40:72]), " "); got != Label {
		t.Errorf("Joliet volume id %q", got)
	}
	if n := binary.LittleEndian.Uint32(pvd[80:]); int(n)*sector != len(img) || binary.BigEndian.Uint32(pvd[84:]) != n {
		t.Errorf("volume space size %d, image %d sectors", n, len(img)/sector)
	}
	if binary.LittleEndian.Uint16(pvd[128:]) != sector {
		t.Errorf("block size %d", binary.LittleEndian.Uint16(pvd[128:]))
	}

	want := map[string][]byte{}
	for _, f := range files {
		want[f.Name] = f.Data
	}

	// Primary hierarchy, with Rock Ridge names.
	root := pvd[156:190]
	entries := r.dir(binary.LittleEndian.Uint32(root[2:]), binary.LittleEndian.Uint32(root[10:]))
	if len(entries) != 2+len(files) || !bytes.Equal(entries[0].id, []byte{0}) || !bytes.Equal(entries[1].id, []byte{1}) {
		t.Fatalf("primary root: %d entries", len(entries))
	}
	dot := susp(entries[0].systemUse)
	if sp := dot["SP"]; len(sp) != 7 || sp[4] != 0xBE || sp[5] != 0xEF {
		t.Errorf("no SUSP indicator in the root: % x", sp)
	}
	if er := dot["ER"]; len(er) < 8 || string(er[8:8+er[4]]) != "RRIP_1991A" {
		t.Errorf("no Rock Ridge ER entry: %q", er)
	}
	var prev string
	for _, e := range entries[2:] {
		id := string(e.id)
		if id <= prev {
			t.Errorf("primary records not sorted: %q after %q", id, prev)
		}
		prev = id
		if !strings.HasSuffix(id, ";1") || len(strings.TrimSuffix(id, ";1")) > 12 || strings.ToUpper(id) != id {
			t.Errorf("primary name %q is not level 1", id)
		}
		entries := susp(e.systemUse)
		nm := entries["NM"]
		if nm == nil {
			t.Errorf("%s: no Rock Ridge name", id)
			continue
		}
		name := string(nm[5:])
		if px := entries["PX"]; px == nil || binary.LittleEndian.Uint32(px[4:]) != 0o100444 {
			t.Errorf("%s: PX mode % x", name, px)
		}
		data, ok := want[name]
		if !ok {
			t.Errorf("unexpected Rock Ridge name %q", name)
			continue
		}
		if got := img[int(e.extent)*sector : int(e.extent)*sector+int(e.size)]; !bytes.Equal(got, data) {
			t.Errorf("%s: content differs", name)
		}
	}

	// Joliet hierarchy.
	jroot := svd[156:190]
	jentries := r.dir(binary.LittleEndian.Uint32(jroot[2:]), binary.LittleEndian.Uint32(jroot[10:]))
	if len(jentries) != 2+len(files) {
		t.Fatalf("Joliet root: %d entries", len(jentries))
	}
	for _, e := range jentries[2:] {
		name := strings.TrimSuffix(decodeUCS2(e.id), ";1")
		data, ok := want[name]
		if !ok {
			t.Errorf("unexpected Joliet name %q", name)
			continue
		}
		if got := img[int(e.extent)*sector : int(e.extent)*sector+int(e.size)]; !bytes.Equal(got, data) {
			t.Errorf("Joliet %s: content differs", name)
		}
	}

	// Reproducible.
	again, _ := ISO(Label, files, fixed)
	if !bytes.Equal(img, again) {
		t.Error("same input, different image")
	}
}

func decodeUCS2(b []byte) string {
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = binary.BigEndian.Uint16(b[2*i:])
	}
	return string(utf16.Decode(u))
}

func TestISOErrors(t *testing.T) {
	tests := []struct {
		name  string
		label string
		files []File
	}{
		{"no label", "", []File{{Name: "a"}}},
		{"long label", strings.Repeat("x", 33), []File{{Name: "a"}}},
		{"no files", Label, nil},
		{"slash", Label, []File{{Name: "a/b"}}},
		{"dotdot", Label, []File{{Name: ".."}}},
		{"twice", Label, []File{{Name: "a"}, {Name: "a"}}},
		{"non-ascii", Label, []File{{Name: "é"}}},
	}
	for _, tt := range tests {
		if _, err := ISO(tt.label, tt.files, fixed); err == nil {
			t.Errorf("%s: no error", tt.name)
		}
	}
}

func TestLevel1Names(t *testing.T) {
	used := map[string]bool{}
	got := []string{}
	for _, n := range []string{"user-data", "user-data2", "meta-data", "network-config", "a.tar.gz", ".hidden"} {
		got = append(got, level1Name(n, used))
	}
	want := []string{"USER_DAT.;1", "USER_DA1.;1", "META_DAT.;1", "NETWORK_.;1", "A_TAR.GZ;1", "_HIDDEN.;1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestSeedReadByOtherTools reads the seed with the system's own tools when
// they are there: blkid (util-linux) for the label, isoinfo (genisoimage)
// for the names in each hierarchy, and the kernel itself (loop mount, as
// root, when it has iso9660).
func TestSeedReadByOtherTools(t *testing.T) {
	img, err := Seed(testConfig(), nil, fixed)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "seed.iso")
	if err := os.WriteFile(path, img, 0o644); err != nil {
		t.Fatal(err)
	}
	ran := 0
	if bin, err := exec.LookPath("blkid"); err == nil {
		ran++
		out, err := exec.Command(bin, "-p", "-o", "export", path).CombinedOutput()
		if err != nil {
			t.Fatalf("blkid: %v\n%s", err, out)
		}
		for _, want := range []string{"LABEL=cidata", "TYPE=iso9660"} {
			if !strings.Contains(string(out), want) {
				t.Errorf("blkid does not report %s:\n%s", want, out)
			}
		}
	}
	if bin, err := exec.LookPath("isoinfo"); err == nil {
		ran++
		for _, mode := range [][]string{{"-R"}, {"-J"}} {
			out, err := exec.Command(bin, append([]string{"-i", path, "-f"}, mode...)...).CombinedOutput()
			if err != nil {
				t.Fatalf("isoinfo %v: %v\n%s", mode, err, out)
			}
			for _, f := range Files {
				if !strings.Contains(string(out), "/"+f) {
					t.Errorf("isoinfo %v does not list %s:\n%s", mode, f, out)
				}
			}
		}
	}
	fsTypes, _ := os.ReadFile("/proc/filesystems")
	if os.Geteuid() == 0 && bytes.Contains(fsTypes, []byte("iso9660")) {
		for _, opts := range []string{"loop,ro", "loop,ro,norock"} {
			dir := t.TempDir()
			if out, err := exec.Command("mount", "-t", "iso9660", "-o", opts, path, dir).CombinedOutput(); err != nil {
				t.Logf("mount -o %s: %v %s (skipping the kernel check)", opts, err, out)
				continue
			}
			ran++
			for _, f := range Files {
				if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
					t.Errorf("mounted with %s: %v", opts, err)
				}
			}
			if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
				t.Errorf("umount: %v %s", err, out)
			}
		}
	}
	if ran == 0 {
		t.Skip("no blkid, isoinfo or iso9660-capable kernel here; the system test boots a guest that mounts the seed")
	}
}
