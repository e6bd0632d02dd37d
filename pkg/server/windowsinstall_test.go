package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
)

// The Windows install routes run against the system libvirtd with a
// directory pool of their own (the test driver cannot upload volumes, as
// pkg/images found), GPUVM_TEST_LIBVIRT overriding the URI; they skip where
// none answers. The ISOs are placeholders: the domain is defined and
// started (software emulation) and destroyed at once, no Windows runs.

type winEnv struct {
	*adminEnv
	conn *hypervisor.Conn
	pool string
	dir  string // the placeholder files
	ctx  context.Context
}

func newWinEnv(t *testing.T) *winEnv {
	t.Helper()
	uri := os.Getenv("GPUVM_TEST_LIBVIRT")
	if uri == "" {
		uri = "qemu:///system"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	conn, err := hypervisor.Open(ctx, uri, log)
	if err != nil {
		t.Skipf("libvirt at %s: %v", uri, err)
	}
	t.Cleanup(func() { conn.Close() })
	var b [4]byte
	_, _ = rand.Read(b[:])
	pool := "gpuvm-wintest-" + hex.EncodeToString(b[:])
	// QEMU runs as its own user (libvirt-qemu), which must reach the
	// pool's and the placeholders' directories.
	open := func(dir string) string {
		for _, d := range []string{filepath.Dir(dir), dir} {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	if err := conn.EnsurePool(ctx, pool, filepath.Join(open(t.TempDir()), "pool")); err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(func() {
		if err := conn.DeletePool(context.Background(), pool); err != nil {
			t.Errorf("delete pool: %v", err)
		}
	})
	e := &winEnv{adminEnv: newAdminEnv(t), conn: conn, pool: pool, dir: open(t.TempDir()), ctx: ctx}
	for name, data := range map[string]string{
		"win.iso": strings.Repeat("\x00", 64<<10), "virtio-win.iso": strings.Repeat("\x00", 64<<10),
		"pw": "p<a>ss&w\"o'rd\n", "empty-pw": "", "CloudbaseInitSetup_x64.msi": "MSI",
	} {
		if err := os.WriteFile(filepath.Join(e.dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e.s.Windows = &WindowsInstalls{Host: conn, Pool: pool, Installation: "test-installation"}
	return e
}

func (e *winEnv) path(name string) string { return filepath.Join(e.dir, name) }

// body is a valid request for the install VM name, changed by edit.
func (e *winEnv) body(t *testing.T, name string, edit func(*api.WindowsInstallRequest)) string {
	req := api.WindowsInstallRequest{Name: name, ISO: e.path("win.iso"), VirtIOWin: e.path("virtio-win.iso"),
		PasswordFile: e.path("pw"), CloudbaseInit: e.path("CloudbaseInitSetup_x64.msi"),
		DomainType: "qemu", MemoryGiB: 1, VCPUs: 1, DiskGiB: 1}
	if edit != nil {
		edit(&req)
	}
	return mustJSON(t, req)
}

// nothingLeft fails unless the pool is empty and no domain is called name.
func (e *winEnv) nothingLeft(t *testing.T, name string) {
	t.Helper()
	vols, err := e.conn.Volumes(e.ctx, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(vols) > 0 {
		t.Errorf("volumes left behind: %v", vols)
	}
	if _, err := e.conn.LookupByName(e.ctx, name); !hypervisor.IsNotFound(err) {
		t.Errorf("domain %s: %v, want not found", name, err)
	}
}

func TestWindowsInstallRefusals(t *testing.T) {
	e := newWinEnv(t)
	tests := []struct {
		name   string
		edit   func(*api.WindowsInstallRequest)
		status int
		field  string
	}{
		{"missing ISO", func(r *api.WindowsInstallRequest) { r.ISO = e.path("gone.iso") }, 422, "iso"},
		{"no ISO", func(r *api.WindowsInstallRequest) { r.ISO = "" }, 422, "iso"},
		{"relative virtio-win", func(r *api.WindowsInstallRequest) { r.VirtIOWin = "virtio-win.iso" }, 422, "virtio_win"},
		{"ISO is a directory", func(r *api.WindowsInstallRequest) { r.ISO = e.dir }, 422, "iso"},
		{"missing password file", func(r *api.WindowsInstallRequest) { r.PasswordFile = e.path("nope") }, 422, "password_file"},
		{"empty password file", func(r *api.WindowsInstallRequest) { r.PasswordFile = e.path("empty-pw") }, 422, "password_file"},
		{"missing MSI", func(r *api.WindowsInstallRequest) { r.CloudbaseInit = e.path("gone.msi") }, 422, "cloudbase_init"},
		{"missing WinFsp", func(r *api.WindowsInstallRequest) { r.WinFsp = e.path("winfsp-gone.msi") }, 422, "winfsp"},
		{"WinFsp not an MSI", func(r *api.WindowsInstallRequest) { r.WinFsp = e.path("pw") }, 422, "winfsp"},
		{"bad edition", func(r *api.WindowsInstallRequest) { r.Edition = "windows95" }, 422, "edition"},
		{"NVIDIA args alone", func(r *api.WindowsInstallRequest) { r.NVIDIAArgs = []string{"-s"} }, 422, "nvidia_args"},
		{"bad name", func(r *api.WindowsInstallRequest) { r.Name = "no/slash" }, 422, "name"},
		{"bad domain type", func(r *api.WindowsInstallRequest) { r.DomainType = "xen" }, 422, "domain_type"},
		{"two GPUs", func(r *api.WindowsInstallRequest) { r.GPUMdev, r.GPUPCI = "x", []string{"0000:c1:00.0"} }, 422, "gpu_mdev"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := e.call(t, "POST", "/v1/admin/images/windows-install", e.admin, e.body(t, "wintest-refused", tc.edit), nil)
			if code != tc.status || body["field"] != tc.field {
				t.Fatalf("%d %v, want %d on field %s", code, body, tc.status, tc.field)
			}
			if strings.Contains(body["detail"].(string), "p<a>ss") {
				t.Errorf("the password is in the answer: %v", body)
			}
			e.nothingLeft(t, "wintest-refused")
		})
	}
	if code, body := e.call(t, "POST", "/v1/admin/images/windows-install", e.ann, e.body(t, "wintest-refused", nil), nil); code != 403 {
		t.Errorf("a user: %d %v", code, body)
	}
	e.nothingLeft(t, "wintest-refused")
}

// failingStart is the real host whose Start fails, after the disk, the
// medium and the domain are made.
type failingStart struct{ *hypervisor.Conn }

func (failingStart) Start(context.Context, string) error { return errors.New("start refused (test)") }

func TestWindowsInstallFailureHalfWay(t *testing.T) {
	e := newWinEnv(t)
	e.s.Windows.Host = failingStart{e.conn}
	code, body := e.call(t, "POST", "/v1/admin/images/windows-install", e.admin, e.body(t, "wintest-half", nil), nil)
	if code != 500 {
		t.Fatalf("%d %v, want 500", code, body)
	}
	e.nothingLeft(t, "wintest-half")
}

func TestWindowsInstallRoute(t *testing.T) {
	e := newWinEnv(t)
	const name = "wintest-ok"
	t.Cleanup(func() {
		ctx := context.Background()
		if i, err := e.conn.LookupByName(ctx, name); err == nil {
			_ = e.conn.Destroy(ctx, i.UUID)
			if err := e.conn.Undefine(ctx, i.UUID); err != nil {
				t.Errorf("undefine: %v", err)
			}
		}
		for _, v := range []string{name + ".qcow2", name + "-media.iso"} {
			if err := e.conn.DeleteVolume(ctx, e.pool, v); err != nil {
				t.Errorf("delete %s: %v", v, err)
			}
		}
	})
	// The domain and volumes as they are when the route starts the domain.
	rec := &recordingStart{Conn: e.conn, pool: e.pool}
	e.s.Windows.Host = rec
	var got api.WindowsInstall
	code, body := e.call(t, "POST", "/v1/admin/images/windows-install", e.admin, e.body(t, name, nil), &got)
	slices.Sort(rec.vols)
	if !slices.Equal(rec.vols, []string{name + "-media.iso", name + ".qcow2"}) {
		t.Errorf("volumes %v", rec.vols)
	}
	if !strings.Contains(rec.xml, "windows-install-"+name) || !strings.Contains(rec.xml, "test-installation") {
		t.Errorf("domain XML lacks the metadata:\n%s", rec.xml)
	}
	for _, want := range []string{"<tpm model='tpm-crb'>", "secure='yes'", "/pool/" + name + ".qcow2", "/pool/" + name + "-media.iso", e.path("win.iso"), e.path("virtio-win.iso")} {
		if !strings.Contains(rec.xml, want) {
			t.Errorf("domain XML lacks %q", want)
		}
	}
	if strings.Contains(rec.xml, "<hyperv") {
		t.Error("Hyper-V enlightenments in a type='qemu' domain (QEMU's emulation refuses them)")
	}
	if n := strings.Count(rec.xml, "device='cdrom'"); n != 3 {
		t.Errorf("%d CD-ROMs, want 3", n)
	}
	if code == 500 && strings.Contains(body["detail"].(string), "swtpm") {
		// The host's swtpm (its local CA's files) is not in order: what
		// the route made is gone again, and the rest needs a started VM.
		e.nothingLeft(t, name)
		t.Skipf("the host cannot start a TPM: %v", body["detail"])
	}
	if code != 202 {
		t.Fatalf("start: %d %v", code, body)
	}
	info, err := e.conn.LookupByName(e.ctx, name)
	if err != nil {
		t.Fatalf("the domain: %v", err)
	}
	if got.Name != name || got.UUID != info.UUID || got.State != "running" || got.Done {
		t.Errorf("answer %+v, domain %+v", got, info)
	}
	// The medium holds the answer file with the password, and is 0600.
	if fi, err := os.Stat(got.Media); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("medium %s: %v %v", got.Media, fi, err)
	}

	// A second install of that name is refused and leaves the first alone.
	if code, body := e.call(t, "POST", "/v1/admin/images/windows-install", e.admin, e.body(t, name, nil), nil); code != 409 || body["field"] != "name" {
		t.Errorf("name taken: %d %v", code, body)
	}
	if _, err := e.conn.LookupByName(e.ctx, name); err != nil {
		t.Errorf("after the refusal: %v", err)
	}

	var st api.WindowsInstall
	if code, body := e.call(t, "GET", "/v1/admin/images/windows-install/"+name, e.admin, "", &st); code != 200 || st.State != "running" || st.Done {
		t.Errorf("state while running: %d %v", code, body)
	}
	// Sysprep would shut it down; pull the plug instead.
	if err := e.conn.Destroy(e.ctx, info.UUID); err != nil {
		t.Fatal(err)
	}
	st = api.WindowsInstall{}
	if code, body := e.call(t, "GET", "/v1/admin/images/windows-install/"+name, e.admin, "", &st); code != 200 || st.State != "shutoff" || !st.Done ||
		!strings.Contains(st.Next, "gpuvm admin image import "+got.Disk+" ") {
		t.Errorf("state once off: %d %v", code, body)
	}
	for _, p := range []string{"/v1/admin/images/windows-install/nothere", "/v1/admin/images/windows-install/a%2Fb"} {
		if code, body := e.call(t, "GET", p, e.admin, "", nil); code != 404 {
			t.Errorf("GET %s: %d %v", p, code, body)
		}
	}
}

// accelHost is the real host with the accelerator check's answer a, as
// on a host without KVM (or with a /dev/kvm nested virtualisation makes
// unusable) whatever this one has.
type accelHost struct {
	recordingStart
	a hypervisor.Accel
}

func (h *accelHost) Accel(context.Context) (hypervisor.Accel, error) { return h.a, nil }

// TestWindowsInstallDomainType: without domain_type the install VM gets the
// accelerator check's type, never an assumed kvm; kvm where the check found
// KVM unusable is refused with the check's reason, and nothing is made.
func TestWindowsInstallDomainType(t *testing.T) {
	e := newWinEnv(t)
	noKVM := hypervisor.Accel{Type: domain.TypeQEMU, Emulated: true, Reason: "libvirt offers no KVM: no /dev/kvm (test)"}
	tests := []struct {
		name      string
		requested string
		accel     hypervisor.Accel
		status    int    // 202 (or 500 where the host's swtpm is broken) or the refusal's
		want      string // the defined domain's type, or the refusal's field
	}{
		{"no type, no KVM", "", noKVM, 202, "qemu"},
		{"kvm, no KVM", "kvm", noKVM, 422, "domain_type"},
		{"qemu, no KVM", "qemu", noKVM, 202, "qemu"},
		{"bad type", "xen", noKVM, 422, "domain_type"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("wintest-type-%d", i)
			h := &accelHost{recordingStart: recordingStart{Conn: e.conn, pool: e.pool}, a: tc.accel}
			e.s.Windows.Host = h
			t.Cleanup(func() { e.removeInstall(t, name) })
			code, body := e.call(t, "POST", "/v1/admin/images/windows-install", e.admin,
				e.body(t, name, func(r *api.WindowsInstallRequest) { r.DomainType = tc.requested }), nil)
			if tc.status != 202 {
				if code != tc.status || body["field"] != tc.want {
					t.Fatalf("%d %v, want %d on field %s", code, body, tc.status, tc.want)
				}
				if tc.requested == "kvm" && !strings.Contains(body["detail"].(string), tc.accel.Reason) {
					t.Errorf("the refusal does not say why KVM is unusable: %v", body["detail"])
				}
				e.nothingLeft(t, name)
				return
			}
			if h.xml == "" {
				t.Fatalf("no domain was started: %d %v", code, body)
			}
			if !strings.Contains(h.xml, "<domain type='"+tc.want+"'") {
				t.Errorf("domain type is not %s:\n%s", tc.want, h.xml)
			}
			if code != 202 && !(code == 500 && strings.Contains(body["detail"].(string), "swtpm")) {
				t.Errorf("start: %d %v", code, body)
			}
		})
	}
}

// removeInstall removes the install VM name and its volumes, if there.
func (e *winEnv) removeInstall(t *testing.T, name string) {
	ctx := context.Background()
	if i, err := e.conn.LookupByName(ctx, name); err == nil {
		_ = e.conn.Destroy(ctx, i.UUID)
		if err := e.conn.Undefine(ctx, i.UUID); err != nil {
			t.Errorf("undefine: %v", err)
		}
	}
	for _, v := range []string{name + ".qcow2", name + "-media.iso"} {
		if ok, _ := e.conn.VolumeExists(ctx, e.pool, v); ok {
			if err := e.conn.DeleteVolume(ctx, e.pool, v); err != nil {
				t.Errorf("delete %s: %v", v, err)
			}
		}
	}
}

// recordingStart keeps the domain's XML and the pool's volumes at the
// moment the route starts the domain.
type recordingStart struct {
	*hypervisor.Conn
	pool, xml string
	vols      []string
}

func (r *recordingStart) Start(ctx context.Context, uuid string) error {
	r.xml, _ = r.Conn.XML(ctx, uuid, false)
	r.vols, _ = r.Conn.Volumes(ctx, r.pool)
	return r.Conn.Start(ctx, uuid)
}

func TestWindowsInstallUnavailable(t *testing.T) {
	e := newAdminEnv(t)
	if code, body := e.call(t, "GET", "/v1/admin/images/windows-install/x", e.admin, "", nil); code != 503 {
		t.Errorf("%d %v", code, body)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// noWindowsHost is a hypervisor with no domain and no volume, which makes
// nothing (the hostile walk's: its requests never get that far).
type noWindowsHost struct{}

var errNoHost = errors.New("noWindowsHost makes nothing")

func (noWindowsHost) CreateEmptyVolume(context.Context, string, string, uint64) (string, error) {
	return "", errNoHost
}
func (noWindowsHost) UploadVolume(context.Context, string, string, []byte) (string, error) {
	return "", errNoHost
}
func (noWindowsHost) DeleteVolume(context.Context, string, string) error { return nil }
func (noWindowsHost) VolumeExists(context.Context, string, string) (bool, error) {
	return false, nil
}
func (noWindowsHost) VolumePath(_ context.Context, pool, name string) (string, error) {
	return "", hypervisor.ErrNotFound
}
func (noWindowsHost) DefineWindowsInstall(context.Context, domain.WindowsInstall) (hypervisor.Info, error) {
	return hypervisor.Info{}, errNoHost
}
func (noWindowsHost) Accel(context.Context) (hypervisor.Accel, error) {
	return hypervisor.Accel{Type: domain.TypeQEMU, Emulated: true, Reason: "noWindowsHost has no KVM"}, nil
}
func (noWindowsHost) LookupByName(context.Context, string) (hypervisor.Info, error) {
	return hypervisor.Info{}, hypervisor.ErrNotFound
}
func (noWindowsHost) Start(context.Context, string) error    { return errNoHost }
func (noWindowsHost) Destroy(context.Context, string) error  { return nil }
func (noWindowsHost) Undefine(context.Context, string) error { return nil }

// racingHost misses the volumes in the name check, as when two requests of
// one name check before either has made its disk.
type racingHost struct {
	*hypervisor.Conn
	checks int
}

func (r *racingHost) VolumeExists(ctx context.Context, pool, name string) (bool, error) {
	if r.checks++; r.checks <= 2 {
		return false, nil
	}
	return r.Conn.VolumeExists(ctx, pool, name)
}

func TestWindowsInstallNameRace(t *testing.T) {
	e := newWinEnv(t)
	const name = "wintest-race"
	if _, err := e.conn.CreateEmptyVolume(e.ctx, e.pool, name+".qcow2", 1<<30); err != nil {
		t.Fatal(err)
	}
	e.s.Windows.Host = &racingHost{Conn: e.conn}
	code, body := e.call(t, "POST", "/v1/admin/images/windows-install", e.admin, e.body(t, name, nil), nil)
	if code != 409 || body["field"] != "name" {
		t.Errorf("%d %v, want 409 on the name", code, body)
	}
	// The first request's disk stays; nothing else was made.
	if vols, err := e.conn.Volumes(e.ctx, e.pool); err != nil || !slices.Equal(vols, []string{name + ".qcow2"}) {
		t.Errorf("volumes %v %v", vols, err)
	}
	if err := e.conn.DeleteVolume(e.ctx, e.pool, name+".qcow2"); err != nil {
		t.Fatal(err)
	}
	e.nothingLeft(t, name)
}

func TestWindowsInstallDomainTaken(t *testing.T) {
	e := newWinEnv(t)
	const name = "wintest-taken"
	w := domain.WindowsInstall{Name: name, UUID: "5f1a2b3c-0000-4000-8000-00000000c0de", VCPUs: 1, MemoryBytes: 1 << 30, DomainType: "qemu",
		Disk: domain.Disk{Path: e.path("disk.qcow2")}, Installer: domain.Disk{Path: e.path("win.iso")}, VirtIO: domain.Disk{Path: e.path("virtio-win.iso")},
		Media: domain.Disk{Path: e.path("media.iso")}, Network: domain.Network{Name: "default"}, Metadata: domain.Metadata{VMID: "windows-install-" + name}}
	if _, err := e.conn.DefineWindowsInstall(e.ctx, w); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.conn.Undefine(context.Background(), w.UUID) })
	code, body := e.call(t, "POST", "/v1/admin/images/windows-install", e.admin, e.body(t, name, nil), nil)
	if code != 409 || body["field"] != "name" || !strings.Contains(body["detail"].(string), "exists already") {
		t.Errorf("%d %v, want 409 on the name", code, body)
	}
	if i, err := e.conn.LookupByName(e.ctx, name); err != nil || i.UUID != w.UUID {
		t.Errorf("the first domain: %+v %v", i, err)
	}
	if vols, err := e.conn.Volumes(e.ctx, e.pool); err != nil || len(vols) != 0 {
		t.Errorf("volumes %v %v", vols, err)
	}
	// Not made by the route (no windows-install profile): not an install.
	if code, body := e.call(t, "GET", "/v1/admin/images/windows-install/"+name, e.admin, "", nil); code != 404 {
		t.Errorf("GET: %d %v", code, body)
	}
}
