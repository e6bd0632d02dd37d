package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/google/uuid"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/hypervisor"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/revert"
	"github.com/gpuvm/gpuvm/pkg/windows"
)

// An unattended Windows install, defined and started by gpuvmd
// (docs/windows.md): the answer file and first-logon script rendered
// (pkg/windows), an empty qcow2 system disk and the answer file's medium
// made in the storage pool, and the install domain
// (domain.WindowsInstall) defined and started. Progress is the domain's
// state: running while Setup runs, shut off once sysprep has shut it down.

// WindowsHost is what the install needs of the hypervisor (a
// *hypervisor.Conn).
type WindowsHost interface {
	CreateEmptyVolume(ctx context.Context, pool, name string, size uint64) (string, error)
	UploadVolume(ctx context.Context, pool, name string, data []byte) (string, error)
	DeleteVolume(ctx context.Context, pool, name string) error
	VolumeExists(ctx context.Context, pool, name string) (bool, error)
	VolumePath(ctx context.Context, pool, name string) (string, error)
	DefineWindowsInstall(ctx context.Context, w domain.WindowsInstall) (hypervisor.Info, error)
	// Accel is the host's accelerator check: the domain type a request
	// without one gets, and whether KVM is usable at all.
	Accel(ctx context.Context) (hypervisor.Accel, error)
	LookupByName(ctx context.Context, name string) (hypervisor.Info, error)
	Start(ctx context.Context, uuid string) error
	Destroy(ctx context.Context, uuid string) error
	Undefine(ctx context.Context, uuid string) error
}

// WindowsInstalls are the Deps of the Windows install routes.
type WindowsInstalls struct {
	Host WindowsHost
	// Pool is the storage pool the disk and medium go to.
	Pool string
	// Installation is written into the domain's metadata.
	Installation string
}

// windowsInstallProfile marks an install VM in its domain's metadata.
const windowsInstallProfile = "windows-install"

var pInstallName = param{Name: "name", In: "path", Description: "the install VM's name", Type: "string"}

var windowsAPIRoutes = []route{
	{Method: "POST", Path: "/v1/admin/images/windows-install", Summary: "Start an unattended Windows install: the answer file rendered from the options, an empty qcow2 disk and the answer file's medium made in the storage pool, the install VM (UEFI Secure Boot, TPM 2.0, Hyper-V enlightenments, three CD-ROMs) defined and started. Paths are on the gpuvmd host. A refusal, or a failure half-way, leaves no volume and no domain. Follow it with GET .../windows-install/{name}", Auth: authAdmin, Body: api.WindowsInstallRequest{}, Status: 202, Answer: api.WindowsInstall{}, Errors: []int{400, 409, 413, 422, 500, 503}},
	{Method: "GET", Path: "/v1/admin/images/windows-install/{name}", Summary: "The state of an unattended Windows install's VM: running while Setup runs, shutoff (done) once sysprep has shut it down, with the command that stores its disk as an image", Auth: authAdmin, Params: []param{pInstallName}, Status: 200, Answer: api.WindowsInstall{}, Errors: []int{404, 503}},
}

func (s *Server) windowsRoutes(admin *gin.RouterGroup) {
	admin.POST("/admin/images/windows-install", s.requireWindows, s.stream, s.startWindowsInstall)
	admin.GET("/admin/images/windows-install/:name", s.requireWindows, s.windowsInstallState)
}

func (s *Server) requireWindows(c *gin.Context) {
	if s.Windows == nil || s.Windows.Host == nil {
		s.writeProblem(c, with(errUnavailable, "this gpuvmd cannot run Windows installs (it has no hypervisor or storage pool)"))
		return
	}
	c.Next()
}

func diskVolume(name string) string  { return name + ".qcow2" }
func mediaVolume(name string) string { return name + "-media.iso" }

// windowsBuild is what a valid request makes.
type windowsBuild struct {
	cfg     windows.Config
	extra   []windows.MediaFile
	install domain.WindowsInstall
	disk    uint64
}

// fieldError is a refusal naming a request field.
type fieldError struct{ field, msg string }

func (e *fieldError) Error() string { return e.field + ": " + e.msg }

// windowsFields are the request's names (api.WindowsInstallRequest) of
// the values pkg/windows refuses; the password and product key are read
// from the files the request names.
var windowsFields = map[windows.Field]string{
	windows.FieldEdition: "edition", windows.FieldComputerName: "computer_name", windows.FieldAdminUser: "user",
	windows.FieldAdminPassword: "password_file", windows.FieldLocale: "locale", windows.FieldInputLocale: "input_locale",
	windows.FieldTimeZone: "timezone", windows.FieldImageIndex: "image_index", windows.FieldImageName: "image_name",
	windows.FieldProductKey: "product_key_file", windows.FieldCloudbaseInitMSI: "cloudbase_init", windows.FieldWinFspMSI: "winfsp",
	windows.FieldNVIDIADriver: "nvidia_driver", windows.FieldNVIDIADriverArgs: "nvidia_args",
}

// windowsFieldError is pkg/windows' refusal (a *windows.ValidationError)
// on the request field of its first problem; its message says them all.
// Any other error is returned as it is.
func windowsFieldError(err error) error {
	var ve *windows.ValidationError
	if !errors.As(err, &ve) || len(ve.Problems) == 0 {
		return err
	}
	first := ve.Problems[0]
	msg := first.Msg
	for _, p := range ve.Problems[1:] {
		msg += "; " + p.Error()
	}
	return &fieldError{cmpOr(windowsFields[first.Field], string(first.Field)), msg}
}

// windowsBuildOf checks req and reads its files; it changes nothing.
func windowsBuildOf(req api.WindowsInstallRequest) (*windowsBuild, error) {
	if err := domain.ValidName(req.Name); err != nil {
		return nil, &fieldError{"name", err.Error()}
	}
	file := func(field, path string) error {
		if !filepath.IsAbs(path) {
			return &fieldError{field, fmt.Sprintf("%q: give an absolute path on the gpuvmd host", path)}
		}
		fi, err := os.Stat(path)
		if err != nil {
			return &fieldError{field, err.Error()}
		}
		if !fi.Mode().IsRegular() {
			return &fieldError{field, fmt.Sprintf("%s is not a regular file", path)}
		}
		return nil
	}
	for _, f := range []struct{ field, path string }{{"iso", req.ISO}, {"virtio_win", req.VirtIOWin}, {"password_file", req.PasswordFile}} {
		if f.path == "" {
			return nil, &fieldError{f.field, "required"}
		}
		if err := file(f.field, f.path); err != nil {
			return nil, err
		}
	}
	secret := func(field, path string) (string, error) {
		if err := file(field, path); err != nil {
			return "", err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return "", &fieldError{field, err.Error()}
		}
		v := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		if v == "" {
			return "", &fieldError{field, path + " is empty"}
		}
		return v, nil
	}
	pw, err := secret("password_file", req.PasswordFile)
	if err != nil {
		return nil, err
	}
	b := &windowsBuild{cfg: windows.Config{
		Edition: windows.Edition(cmpOr(req.Edition, string(windows.Windows11))), ComputerName: req.ComputerName,
		AdminUser: req.User, AdminPassword: pw, Locale: req.Locale, InputLocale: req.InputLocale, TimeZone: req.TimeZone,
		Image: windows.Image{Index: req.ImageIndex, Name: req.ImageName}, Sysprep: !req.NoSysprep,
	}}
	if req.ProductKeyFile != "" {
		if b.cfg.ProductKey, err = secret("product_key_file", req.ProductKeyFile); err != nil {
			return nil, err
		}
	}
	add := func(field, path string) (string, error) {
		if err := file(field, path); err != nil {
			return "", err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return "", &fieldError{field, err.Error()}
		}
		b.extra = append(b.extra, windows.MediaFile{Name: filepath.Base(path), Data: data})
		return filepath.Base(path), nil
	}
	if req.CloudbaseInit != "" {
		if b.cfg.CloudbaseInitMSI, err = add("cloudbase_init", req.CloudbaseInit); err != nil {
			return nil, err
		}
	}
	if req.WinFsp != "" {
		if b.cfg.WinFspMSI, err = add("winfsp", req.WinFsp); err != nil {
			return nil, err
		}
	}
	if req.NVIDIADriver != "" {
		if b.cfg.NVIDIADriver, err = add("nvidia_driver", req.NVIDIADriver); err != nil {
			return nil, err
		}
		b.cfg.NVIDIADriverArgs = req.NVIDIAArgs
	} else if len(req.NVIDIAArgs) > 0 {
		return nil, &fieldError{"nvidia_args", "needs nvidia_driver"}
	}
	if req.LicensingScript != "" {
		if filepath.Base(req.LicensingScript) != windows.LicensingScript {
			return nil, &fieldError{"licensing_script", "the file must be named " + windows.LicensingScript}
		}
		if _, err := add("licensing_script", req.LicensingScript); err != nil {
			return nil, err
		}
	}
	if err := b.cfg.Validate(); err != nil {
		return nil, windowsFieldError(err)
	}
	switch domain.Type(req.DomainType) {
	case "", domain.TypeKVM, domain.TypeQEMU:
	default:
		return nil, &fieldError{"domain_type", fmt.Sprintf("%q is neither %q nor %q (or leave it out: the host's choice)", req.DomainType, domain.TypeKVM, domain.TypeQEMU)}
	}
	b.disk = uint64(cmp.Or(req.DiskGiB, 64)) << 30
	w := domain.WindowsInstall{
		Name: req.Name, UUID: uuid.NewString(), Title: "gpuvm: unattended install of " + b.cfg.Edition.Label(),
		VCPUs: cmp.Or(req.VCPUs, 4), MemoryBytes: uint64(cmp.Or(req.MemoryGiB, 8)) << 30,
		DomainType: domain.Type(req.DomainType), // empty: the host's choice (windowsDomainType)
		Installer:  domain.Disk{Path: req.ISO}, VirtIO: domain.Disk{Path: req.VirtIOWin},
		Network:      domain.Network{Name: cmpOr(req.Network, "default")},
		Graphics:     &domain.Graphics{Type: domain.GraphicsVNC},
		InsecureBoot: req.InsecureBoot, HideHypervisor: req.HideHypervisor,
		Metadata: domain.Metadata{VMID: "windows-install-" + req.Name, Profile: windowsInstallProfile},
	}
	switch {
	case req.GPUMdev != "" && len(req.GPUPCI) > 0:
		return nil, &fieldError{"gpu_mdev", "give gpu_mdev or gpu_pci, not both"}
	case req.GPUMdev != "":
		w.Hostdevs = []domain.Hostdev{{Type: domain.HostdevMdev, UUID: req.GPUMdev}}
	case len(req.GPUPCI) > 0:
		w.Hostdevs = []domain.Hostdev{{Type: domain.HostdevPCI, Addresses: req.GPUPCI, Managed: true}}
	}
	// Checked with the volumes' paths to come, so that a bad domain
	// option is refused before anything is made.
	check := w
	check.Disk, check.Media = domain.Disk{Path: "/" + diskVolume(req.Name)}, domain.Disk{Path: "/" + mediaVolume(req.Name)}
	if err := check.Validate(); err != nil {
		return nil, &fieldError{"domain", err.Error()}
	}
	b.install = w
	return b, nil
}

func (s *Server) startWindowsInstall(c *gin.Context) {
	var req api.WindowsInstallRequest
	if !s.decodeJSON(c, &req) {
		return
	}
	b, err := windowsBuildOf(req)
	var fe *fieldError
	if errors.As(err, &fe) {
		s.writeProblem(c, withField(errValidation, fe.field, fe.Error()))
		return
	}
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	auditTarget(c, "windows-install/"+req.Name)
	ctx := c.Request.Context()
	w := s.Windows
	if b.install.DomainType, err = windowsDomainType(ctx, w.Host, b.install.DomainType); err != nil {
		s.writeProblem(c, err)
		return
	}
	// The name is free: no domain and no volume has it.
	if _, err := w.Host.LookupByName(ctx, req.Name); err == nil || !hypervisor.IsNotFound(err) {
		if err == nil || errors.Is(err, hypervisor.ErrNotGpuvm) {
			s.writeProblem(c, withField(errConflict, "name", fmt.Sprintf("a domain called %q exists already", req.Name)))
		} else {
			s.writeProblem(c, fmt.Errorf("looking up domain %q: %w", req.Name, err))
		}
		return
	}
	for _, v := range []string{diskVolume(req.Name), mediaVolume(req.Name)} {
		ok, err := w.Host.VolumeExists(ctx, w.Pool, v)
		if err != nil {
			s.writeProblem(c, fmt.Errorf("looking up volume %s: %w", v, err))
			return
		}
		if ok {
			s.writeProblem(c, withField(errConflict, "name", fmt.Sprintf("pool %s has a volume %s already", w.Pool, v)))
			return
		}
	}
	iso, err := windows.Media(b.cfg, nil, b.extra, time.Now().UTC())
	if errors.As(windowsFieldError(err), &fe) {
		s.writeProblem(c, withField(errValidation, fe.field, fe.Error()))
		return
	}
	if err != nil { // the built-in templates' fault
		s.writeProblem(c, fmt.Errorf("windows install %s: rendering the install medium: %w", req.Name, err))
		return
	}
	out, err := s.makeWindowsInstall(ctx, b, iso)
	var p *Problem
	if errors.As(err, &p) {
		s.writeProblem(c, p)
		return
	}
	if err != nil {
		// The route is an admin's, who needs libvirt's reason to fix the
		// host (firmware, swtpm, the network).
		s.log.Error("windows install failed", "vm", req.Name, "err", err)
		s.writeProblem(c, with(errInternal, err.Error()))
		return
	}
	s.log.Info("windows install started", "vm", out.Name, "uuid", out.UUID, "edition", b.cfg.Edition, "by", user(c).Name)
	c.JSON(http.StatusAccepted, out)
}

// windowsDomainType is the install VM's domain type: the host's accelerator
// check's when the request gives none; a requested kvm is refused where that
// check found KVM unusable, with its reason.
func windowsDomainType(ctx context.Context, h WindowsHost, requested domain.Type) (domain.Type, error) {
	a, err := h.Accel(ctx)
	if err != nil {
		return "", fmt.Errorf("windows install: checking the accelerator: %w", err)
	}
	switch {
	case requested == "":
		return a.Type, nil
	case requested == domain.TypeKVM && a.Type != domain.TypeKVM:
		return "", withField(errValidation, "domain_type", fmt.Sprintf("KVM is not usable on this host (%s): ask for %q or leave domain_type out", a.Reason, domain.TypeQEMU))
	}
	return requested, nil
}

// makeWindowsInstall makes the disk, the medium and the domain and starts
// it; a failure removes what it made.
func (s *Server) makeWindowsInstall(ctx context.Context, b *windowsBuild, iso []byte) (api.WindowsInstall, error) {
	w, name := s.Windows, b.install.Name
	undo := &revert.Reverter{}
	defer func() {
		if err := undo.Revert(); err != nil {
			s.log.Error("windows install: removing what a failed start made", "vm", name, "err", err)
		}
	}()
	bg := context.WithoutCancel(ctx)
	disk, err := w.Host.CreateEmptyVolume(ctx, w.Pool, diskVolume(name), b.disk)
	if err != nil {
		if ok, _ := w.Host.VolumeExists(bg, w.Pool, diskVolume(name)); ok { // a request of the same name came first
			return api.WindowsInstall{}, withField(errConflict, "name", fmt.Sprintf("pool %s has a volume %s already", w.Pool, diskVolume(name)))
		}
		return api.WindowsInstall{}, fmt.Errorf("windows install %s: creating the disk: %w", name, err)
	}
	undo.AddNamed("disk volume", func() error { return w.Host.DeleteVolume(bg, w.Pool, diskVolume(name)) })
	media, err := w.Host.UploadVolume(ctx, w.Pool, mediaVolume(name), iso)
	if err != nil {
		return api.WindowsInstall{}, fmt.Errorf("windows install %s: uploading the install medium: %w", name, err)
	}
	undo.AddNamed("medium volume", func() error { return w.Host.DeleteVolume(bg, w.Pool, mediaVolume(name)) })
	d := b.install
	d.Disk, d.Media = domain.Disk{Path: disk}, domain.Disk{Path: media}
	d.Metadata.Installation = w.Installation
	d.Metadata.Volumes = []domain.VolumeRef{{Pool: w.Pool, Name: diskVolume(name)}, {Pool: w.Pool, Name: mediaVolume(name)}}
	info, err := w.Host.DefineWindowsInstall(ctx, d)
	if err != nil {
		return api.WindowsInstall{}, fmt.Errorf("windows install %s: defining the domain: %w", name, err)
	}
	undo.AddNamed("domain", func() error {
		return errors.Join(w.Host.Destroy(bg, d.UUID), w.Host.Undefine(bg, d.UUID))
	})
	if err := w.Host.Start(ctx, d.UUID); err != nil {
		return api.WindowsInstall{}, fmt.Errorf("windows install %s: starting the domain: %w", name, err)
	}
	undo.Success()
	info.State = hypervisor.StateRunning
	return installAnswer(info, disk, media), nil
}

func installAnswer(info hypervisor.Info, disk, media string) api.WindowsInstall {
	out := api.WindowsInstall{Name: info.Name, UUID: info.UUID, State: string(info.State), Reason: info.Reason,
		Done: info.State == hypervisor.StateShutoff, Disk: disk, Media: media}
	if out.Done {
		out.Next = fmt.Sprintf("gpuvm admin image import %s --name IMAGE --os windows --firmware uefi", disk)
	}
	return out
}

func (s *Server) windowsInstallState(c *gin.Context) {
	name := c.Param("name")
	ctx := c.Request.Context()
	w := s.Windows
	notFound := with(errNotFound, fmt.Sprintf("no Windows install VM is called %q", clip(name, 80)))
	if domain.ValidName(name) != nil {
		s.writeProblem(c, notFound)
		return
	}
	info, err := w.Host.LookupByName(ctx, name)
	if hypervisor.IsNotFound(err) || errors.Is(err, hypervisor.ErrNotGpuvm) || (err == nil && info.Metadata.Profile != windowsInstallProfile) {
		s.writeProblem(c, notFound)
		return
	}
	if err != nil {
		s.writeProblem(c, fmt.Errorf("looking up domain %q: %w", name, err))
		return
	}
	disk, err := w.Host.VolumePath(ctx, w.Pool, diskVolume(name))
	if err != nil {
		s.writeProblem(c, fmt.Errorf("windows install %s: its disk: %w", name, err))
		return
	}
	media, _ := w.Host.VolumePath(ctx, w.Pool, mediaVolume(name))
	c.JSON(http.StatusOK, installAnswer(info, disk, media))
}
