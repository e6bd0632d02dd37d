package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/images"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// The refusals of the image routes, class by class: every value a request
// field may have wrong is refused with 422 (400 for the form of a chunk)
// naming that field exactly; a chunk whose body breaks
// off is the client's fault (4xx, never logged at error, audited as a
// refusal) and leaves the upload where it was; a storage pool that fails
// is the server's, and never blamed on the source.

// errorLog keeps the messages logged at error or above.
type errorLog struct {
	mu   sync.Mutex
	msgs []string
}

func (h *errorLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *errorLog) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelError {
		h.mu.Lock()
		h.msgs = append(h.msgs, r.Message)
		h.mu.Unlock()
	}
	return nil
}
func (h *errorLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *errorLog) WithGroup(string) slog.Handler      { return h }

func (h *errorLog) take() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := h.msgs
	h.msgs = nil
	return m
}

// lastAudit is the newest audit entry.
func lastAudit(t *testing.T, e *adminEnv) store.AuditEntry {
	t.Helper()
	entries, _, err := e.st.ListAudit(context.Background(), store.AuditFilter{Limit: 1})
	if err != nil || len(entries) == 0 {
		t.Fatalf("audit: %v, %d entries", err, len(entries))
	}
	return entries[0]
}

func imagesEnv(t *testing.T, vols images.Volumes) (*adminEnv, *images.Uploads, *errorLog) {
	t.Helper()
	e := newAdminEnv(t)
	up := &images.Uploads{Dir: t.TempDir(), MaxBytes: 1 << 20}
	e.s.Images = &images.Manager{Store: e.st, Volumes: vols, Pool: "gpuvm", Uploads: up, Log: slog.New(slog.DiscardHandler)}
	errs := &errorLog{}
	e.s.log = slog.New(errs)
	return e, up, errs
}

// badImageNames are names no image can have; path: the name reaches the
// upload route's handler (a '/' makes another path).
var badImageNames = []struct {
	name string
	path bool
}{
	{"Upper", true}, {"UPPER", true}, {".hidden", true}, {"-dash", true}, {"_under", true}, {"has space", true},
	{"a/b", false}, {"../etc", false}, {"disk@2", true}, {"naïve", true}, {"nul\x00byte", true},
	{strings.Repeat("a", 64), true}, {"tab\tname", true}, {"new\nline", true}, {"emoji😀", true}, {"%", true},
}

// Every route that takes an image name refuses a bad one with 422 on name.
func TestImageNameRefusedOnEveryRoute(t *testing.T) {
	e, _, _ := imagesEnv(t, dirVolumes{t.TempDir()})
	for _, bad := range badImageNames {
		n := mustJSON(t, bad.name)
		for _, r := range []struct{ method, path, body string }{
			{"POST", "/v1/admin/images", `{"source_path":"/nonexistent/disk.qcow2","name":` + n + `,"os":"linux"}`},
			{"POST", "/v1/admin/images", `{"upload":true,"name":` + n + `,"os":"linux"}`},
			{"POST", "/v1/admin/images/publish", `{"vm":"nope","name":` + n + `,"os":"linux"}`},
			{"PUT", "/v1/admin/images/uploads/" + url.PathEscape(bad.name), "chunk"},
		} {
			if r.method == "PUT" && !bad.path {
				continue
			}
			rec, body := send(t, e.s, r.method, r.path, e.admin, r.body, api.UploadOffsetHeader, "0", "Content-Type", "application/json")
			if rec.Code != 422 || body["field"] != "name" {
				t.Errorf("%s %s with name %q: %d %v, want 422 on field name", r.method, r.path, bad.name, rec.Code, body)
			}
		}
	}
}

// Every other refused value of an import names its field.
func TestImportRefusalsNameTheField(t *testing.T) {
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-img is not installed")
	}
	dir := t.TempDir()
	raw := filepath.Join(dir, "disk.raw")
	vmdk := filepath.Join(dir, "disk.vmdk")
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(raw, make([]byte, 1<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("qemu-img", "create", "-f", "vmdk", vmdk, "1M").CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	e, up, _ := imagesEnv(t, dirVolumes{t.TempDir()})
	if _, err := up.Write("up", 0, strings.NewReader("data")); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = up.Remove("up") }()
	for _, tc := range []struct {
		name, body, field string
		noUploads         bool
	}{
		{"os", `{"source_path":"` + raw + `","name":"a","os":"plan9"}`, "os", false},
		{"firmware", `{"source_path":"` + raw + `","name":"a","os":"linux","firmware":"coreboot"}`, "firmware", false},
		{"checksum form", `{"source_path":"` + raw + `","name":"a","os":"linux","sha256":"abc"}`, "sha256", false},
		{"checksum mismatch", `{"source_path":"` + raw + `","name":"a","os":"linux","sha256":"` + strings.Repeat("0", 64) + `"}`, "sha256", false},
		{"relative source", `{"source_path":"disk.raw","name":"a","os":"linux"}`, "source_path", false},
		{"missing source", `{"source_path":"/nonexistent/disk.raw","name":"a","os":"linux"}`, "source_path", false},
		{"source a directory", `{"source_path":"` + dir + `","name":"a","os":"linux"}`, "source_path", false},
		{"empty source", `{"source_path":"` + empty + `","name":"a","os":"linux"}`, "source_path", false},
		{"source a VMDK", `{"source_path":"` + vmdk + `","name":"a","os":"linux"}`, "source_path", false},
		{"upload and source", `{"upload":true,"source_path":"` + raw + `","name":"up","os":"linux"}`, "upload", false},
		{"nothing uploaded", `{"upload":true,"name":"never","os":"linux"}`, "upload", false},
		{"no uploads taken", `{"upload":true,"name":"a","os":"linux"}`, "upload", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := e.s.Images.(*images.Manager)
			if tc.noUploads {
				m.Uploads = nil
				defer func() { m.Uploads = up }()
			}
			code, body := e.call(t, "POST", "/v1/admin/images", e.admin, tc.body, nil)
			if code != 422 || body["field"] != tc.field {
				t.Fatalf("%d %v, want 422 on field %s", code, body, tc.field)
			}
		})
	}
}

// brokenPool is a storage pool that fails: VolumeExists with existsErr,
// StreamVolume with err after reading readFirst bytes of the source.
type brokenPool struct {
	dirVolumes
	existsErr error
	readFirst int64
	err       error
}

func (b brokenPool) VolumeExists(ctx context.Context, pool, name string) (bool, error) {
	if b.existsErr != nil {
		return false, b.existsErr
	}
	return b.dirVolumes.VolumeExists(ctx, pool, name)
}

func (b brokenPool) StreamVolume(ctx context.Context, pool, name string, size uint64, r io.Reader) (string, error) {
	if b.err == nil {
		return b.dirVolumes.StreamVolume(ctx, pool, name, size, r)
	}
	if _, err := io.CopyN(io.Discard, r, b.readFirst); err != nil {
		return "", err
	}
	return "", b.err
}

// shrinkingPool truncates the source after the first bytes it reads, as a
// source changed while it is copied.
type shrinkingPool struct {
	dirVolumes
	source string
}

func (s shrinkingPool) StreamVolume(ctx context.Context, pool, name string, size uint64, r io.Reader) (string, error) {
	first := make([]byte, 4096)
	n, err := io.ReadFull(r, first)
	if err != nil {
		return "", err
	}
	if err := os.Truncate(s.source, 8192); err != nil {
		return "", err
	}
	return s.dirVolumes.StreamVolume(ctx, pool, name, size, io.MultiReader(strings.NewReader(string(first[:n])), r))
}

// A pool that fails is the server's failure (500; 503 while libvirt is
// gone), says what failed, is logged at error and audited as a failure;
// only a source that changed gets 422 on its field.
func TestImportStorageFailureIsTheServers(t *testing.T) {
	if _, err := exec.LookPath("qemu-img"); err != nil {
		t.Skip("qemu-img is not installed")
	}
	src := filepath.Join(t.TempDir(), "disk.raw")
	body := `{"source_path":"` + src + `","name":"disk","os":"linux"}`
	pool := dirVolumes{t.TempDir()}
	for _, tc := range []struct {
		name   string
		vols   images.Volumes
		status int
		field  string
		want   []string // in the detail
	}{
		{"the pool fails at create", brokenPool{dirVolumes: pool, err: errors.New("storage pool gpuvm is not active")}, 500, "",
			[]string{"storage pool", "volume image-disk-v1.raw of pool gpuvm", "0 of 1048576 bytes", "not active"}},
		{"the upload fails at its start", brokenPool{dirVolumes: pool, readFirst: 65536, err: errors.New("stream send: I/O error")}, 500, "",
			[]string{"storage pool", "65536 of 1048576 bytes", "I/O error"}},
		{"libvirt is gone", brokenPool{dirVolumes: pool, err: fmt.Errorf("stream: %w", hypervisor.ErrDisconnected)}, 503, "",
			[]string{"storage pool", "0 of 1048576 bytes"}},
		{"the pool cannot be asked", brokenPool{dirVolumes: pool, existsErr: errors.New("pool refresh failed")}, 500, "",
			[]string{"storage pool", "looking up volume", "pool refresh failed"}},
		{"the source changes", shrinkingPool{dirVolumes: pool, source: src}, 422, "source_path",
			[]string{"the source changed", "8192 bytes read, 1048576 when the copy began"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := os.WriteFile(src, make([]byte, 1<<20), 0o600); err != nil {
				t.Fatal(err)
			}
			e, _, errs := imagesEnv(t, tc.vols)
			code, got := e.call(t, "POST", "/v1/admin/images", e.admin, body, nil)
			detail, _ := got["detail"].(string)
			if code != tc.status || fmt.Sprint(got["field"]) != fmt.Sprint(cmpOr(tc.field, "<nil>")) {
				t.Fatalf("%d %v, want %d on field %q", code, got, tc.status, tc.field)
			}
			for _, w := range tc.want {
				if !strings.Contains(detail, w) {
					t.Errorf("detail %q lacks %q", detail, w)
				}
			}
			if tc.status >= 500 && strings.Contains(detail, "changed") {
				t.Errorf("the pool's failure is blamed on the source: %q", detail)
			}
			wantOutcome, logged := store.AuditRefused, false
			if tc.status >= 500 {
				wantOutcome, logged = store.AuditFailed, true
			}
			if a := lastAudit(t, e); a.Outcome != wantOutcome || a.Status != tc.status {
				t.Errorf("audited %s %d, want %s %d", a.Outcome, a.Status, wantOutcome, tc.status)
			}
			if m := errs.take(); (len(m) > 0) != logged {
				t.Errorf("logged at error: %v, want %v", m, logged)
			}
			if imgs, _ := e.st.ListImages(context.Background()); len(imgs) != 0 {
				t.Errorf("stored %v", imgs)
			}
			if left, _ := os.ReadDir(pool.dir); len(left) != 0 {
				t.Errorf("left in the pool: %v", left)
			}
		})
	}
}

// brokenBody gives data, then fails with err (nil: io.EOF).
type brokenBody struct {
	data []byte
	err  error
}

func (b *brokenBody) Read(p []byte) (int, error) {
	if len(b.data) == 0 {
		if b.err == nil {
			return 0, io.EOF
		}
		return 0, b.err
	}
	n := copy(p, b.data)
	b.data = b.data[n:]
	return n, nil
}

func putChunk(e *adminEnv, name string, offset int64, body io.Reader, length int64, hdr ...string) (*httptest.ResponseRecorder, map[string]any) {
	req := httptest.NewRequest("PUT", "/v1/admin/images/uploads/"+name, body)
	req.ContentLength = length
	req.Header.Set("Authorization", "Bearer "+e.admin)
	req.Header.Set(api.UploadOffsetHeader, strconv.FormatInt(offset, 10))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	rec := httptest.NewRecorder()
	e.s.ServeHTTP(rec, req)
	m := map[string]any{}
	_ = json.Unmarshal(rec.Body.Bytes(), &m)
	return rec, m
}

func uploadOffset(t *testing.T, e *adminEnv, name string) int64 {
	t.Helper()
	var st api.Upload
	if code, body := e.call(t, "GET", "/v1/admin/images/uploads/"+name, e.admin, "", &st); code != 200 {
		t.Fatalf("offset: %d %v", code, body)
	}
	return st.Offset
}

// A chunk whose body breaks off, or whose headers disagree with it, is the
// client's fault: 4xx naming the field, logged below error, audited as a
// refusal, and the upload still ends where it did, so that it resumes.
func TestUploadChunkThatBreaksOff(t *testing.T) {
	e, _, errs := imagesEnv(t, dirVolumes{t.TempDir()})
	const name = "desk"
	if rec, body := putChunk(e, name, 0, strings.NewReader(strings.Repeat("a", 100)), 100); rec.Code != 200 {
		t.Fatalf("first chunk: %d %v", rec.Code, body)
	}
	data := func(n int) []byte { return []byte(strings.Repeat("b", n)) }
	for _, tc := range []struct {
		name   string
		body   io.Reader
		length int64
		hdr    []string
		status int
		field  string
		want   string
	}{
		{"shorter than its Content-Length", &brokenBody{data: data(40)}, 100, nil, 400, "body", "ended after 40 of 100 bytes (bytes 100-199 of the upload)"},
		{"nothing of its Content-Length", &brokenBody{}, 100, nil, 400, "body", "ended after 0 of 100 bytes"},
		{"longer than its Content-Length", &brokenBody{data: data(60)}, 20, nil, 400, "body", "past its Content-Length of 20 bytes"},
		{"connection reset mid-body", &brokenBody{data: data(40), err: errors.New("read tcp: connection reset by peer")}, 100, nil, 400, "body", "ended after 40 of 100 bytes"},
		{"chunked body cut off", &brokenBody{data: data(40), err: io.ErrUnexpectedEOF}, -1, nil, 400, "body", "broke off after 40 bytes"},
		{"too slow", &brokenBody{data: data(40), err: os.ErrDeadlineExceeded}, 100, nil, 408, "body", "ended after 40 of 100 bytes"},
		{"over the upload's limit", &brokenBody{data: data(1 << 20)}, 1 << 20, nil, 422, "body", "more than"},
		{"Content-Range elsewhere", &brokenBody{data: data(50)}, 50, []string{"Content-Range", "bytes 0-49/*"}, 400, "Content-Range", "starts at 0"},
		{"Content-Range of another length", &brokenBody{data: data(50)}, 50, []string{"Content-Range", "bytes 100-199/*"}, 400, "Content-Range", "Content-Length 50"},
		{"Content-Range past its total", &brokenBody{data: data(50)}, 50, []string{"Content-Range", "bytes 100-149/120"}, 400, "Content-Range", "total"},
		{"Content-Range not of bytes", &brokenBody{data: data(50)}, 50, []string{"Content-Range", "items 100-149/*"}, 400, "Content-Range", "write bytes"},
		{"Content-Range backwards", &brokenBody{data: data(50)}, 50, []string{"Content-Range", "bytes 149-100/*"}, 400, "Content-Range", "write bytes"},
		{"Content-Range open", &brokenBody{data: data(50)}, 50, []string{"Content-Range", "bytes 100-/*"}, 400, "Content-Range", "write bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec, body := putChunk(e, name, 100, tc.body, tc.length, tc.hdr...)
			detail, _ := body["detail"].(string)
			if rec.Code != tc.status || body["field"] != tc.field || !strings.Contains(detail, tc.want) {
				t.Fatalf("%d %v, want %d on field %s saying %q", rec.Code, body, tc.status, tc.field, tc.want)
			}
			if h := rec.Header().Get(api.UploadOffsetHeader); h != "" && h != "100" {
				t.Errorf("answer's %s %s, want 100", api.UploadOffsetHeader, h)
			}
			if off := uploadOffset(t, e, name); off != 100 {
				t.Errorf("the upload ends at %d after a refused chunk, want 100", off)
			}
			if m := errs.take(); len(m) > 0 {
				t.Errorf("logged at error: %v", m)
			}
			entries, _, err := e.st.ListAudit(context.Background(), store.AuditFilter{Action: "image."})
			if err != nil || len(entries) == 0 {
				t.Fatalf("audit: %v %v", entries, err)
			}
			if a := entries[0]; a.Outcome != store.AuditRefused || a.Status != tc.status {
				t.Errorf("audited %s %d, want %s %d", a.Outcome, a.Status, store.AuditRefused, tc.status)
			}
		})
	}
	// It resumes, a Content-Range that agrees being welcome.
	if rec, body := putChunk(e, name, 100, strings.NewReader(strings.Repeat("c", 50)), 50, "Content-Range", "bytes 100-149/150"); rec.Code != 200 ||
		rec.Header().Get(api.UploadOffsetHeader) != "150" {
		t.Fatalf("the chunk again: %d %v", rec.Code, body)
	}
}

// A connection closed half-way through a chunk's body, on a real
// connection: 400 on body, and the upload as it was.
func TestUploadChunkConnectionClosed(t *testing.T) {
	e, _, errs := imagesEnv(t, dirVolumes{t.TempDir()})
	srv := httptest.NewServer(e.s)
	defer srv.Close()
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT /v1/admin/images/uploads/desk HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n%s: 0\r\nContent-Length: 1000\r\n\r\n%s",
		e.admin, api.UploadOffsetHeader, strings.Repeat("a", 300))
	if err := conn.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 400 || !strings.Contains(string(b), `"field":"body"`) || !strings.Contains(string(b), "after 300 of 1000 bytes") {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if rec, body := send(t, e.s, "GET", "/v1/admin/images/uploads/desk", e.admin, ""); rec.Code != 200 || body["offset"] != float64(0) {
		t.Fatalf("after the broken chunk: %d %v", rec.Code, body)
	}
	if m := errs.take(); len(m) > 0 {
		t.Errorf("logged at error: %v", m)
	}
}

// A chunk the disk cannot take is the server's failure: 500, logged at
// error, audited as a failure.
func TestUploadChunkDiskFailureIsTheServers(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full")
	}
	e, up, errs := imagesEnv(t, dirVolumes{t.TempDir()})
	if err := os.Symlink("/dev/full", filepath.Join(up.Dir, "desk.part")); err != nil {
		t.Fatal(err)
	}
	rec, body := putChunk(e, "desk", 0, strings.NewReader("data"), 4)
	if rec.Code != 500 {
		t.Fatalf("%d %v, want 500", rec.Code, body)
	}
	if a := lastAudit(t, e); a.Outcome != store.AuditFailed || a.Status != 500 {
		t.Errorf("audited %s %d", a.Outcome, a.Status)
	}
	if m := errs.take(); len(m) == 0 {
		t.Error("not logged at error")
	}
}
