package domain

import (
	"errors"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const (
	testUUID = "6f1d8a4e-2b7c-4e0a-9d3f-5a6b7c8d9e01"
	mdevUUID = "b3c4d5e6-f7a8-4b9c-8d0e-1f2a3b4c5d6e"
)

// Specs behind the golden files, one per kind of VM gpuvm makes.
func goldenSpecs() map[string]Spec {
	meta := Metadata{Installation: "0f6f1a52-9a40-4c3e-8d7e-2b1f3c4d5e6f", VMID: "vm-42", Owner: "alice", Profile: "render-l40s",
		Volumes: []VolumeRef{{Pool: "gpuvm", Name: "vm-42.qcow2"}, {Pool: "gpuvm", Name: "vm-42-seed.iso"}}}
	vnc := &Graphics{Type: GraphicsVNC, Password: "s3cr3t!x", WebSocket: -1}
	overlay := Disk{Pool: "gpuvm", Volume: "vm-42.qcow2"}
	seed := Disk{Pool: "gpuvm", Volume: "vm-42-seed.iso", CDROM: true}
	return map[string]Spec{
		"linux-tiny": {
			Name: "gpuvm-tiny", UUID: testUUID, VCPUs: 1, MemoryBytes: 256 << 20,
			DomainType: TypeQEMU,
			Kernel:     "/var/lib/gpuvm/guest/vmlinuz", Initrd: "/var/lib/gpuvm/guest/initrd.img",
			Cmdline:   "console=ttyS0 panic=-1",
			Disks:     []Disk{seed},
			Graphics:  vnc,
			SerialLog: "/var/log/gpuvm/gpuvm-tiny.serial.log",
			Metadata:  Metadata{VMID: "vm-tiny", Owner: "ci", Profile: "tiny"},
		},
		"vgpu-mdev": {
			Name: "gpuvm-vm-42", UUID: testUUID, VCPUs: 8, MemoryBytes: 32 << 30,
			DomainType: TypeKVM,
			Disks:      []Disk{overlay, seed},
			Network:    Network{Name: "default"},
			Graphics:   vnc,
			GuestAgent: true,
			Hostdevs:   []Hostdev{{Type: HostdevMdev, UUID: mdevUUID, Display: true}},
			Metadata:   meta,
		},
		"vgpu-vendor-vfio": {
			Name: "gpuvm-vm-43", UUID: testUUID, VCPUs: 8, MemoryBytes: 48 << 30,
			DomainType: TypeKVM,
			Disks:      []Disk{overlay, seed},
			Network:    Network{Name: "default"},
			Graphics:   vnc,
			GuestAgent: true,
			Hostdevs:   []Hostdev{{Type: HostdevPCI, Addresses: []string{"0000:41:00.4"}, Managed: false}},
			Metadata:   Metadata{VMID: "vm-43", Owner: "bob", Profile: "l40s-12q"},
		},
		"passthrough-audio": {
			Name: "gpuvm-vm-44", UUID: testUUID, VCPUs: 16, MemoryBytes: 64 << 30,
			DomainType: TypeKVM,
			Disks:      []Disk{overlay, seed},
			Network:    Network{Name: "default", MAC: "52:54:00:12:34:56"},
			Graphics:   &Graphics{Type: GraphicsSpice, Password: "a-longer-spice-ticket"},
			GuestAgent: true,
			Hostdevs:   []Hostdev{{Type: HostdevPCI, Addresses: []string{"0000:c1:00.0", "0000:c1:00.1"}, Managed: true}},
			Metadata:   Metadata{VMID: "vm-44", Owner: "carol", Profile: "whole-h100"},
		},
		"linux-home": {
			Name: "gpuvm-tiny-home", UUID: testUUID, VCPUs: 1, MemoryBytes: 256 << 20,
			DomainType: TypeQEMU,
			Kernel:     "/var/lib/gpuvm/guest/vmlinuz", Initrd: "/var/lib/gpuvm/guest/initrd.img",
			Cmdline:     "console=ttyS0 panic=-1",
			Disks:       []Disk{seed},
			Network:     Network{Name: "default"},
			Filesystems: []Filesystem{{Source: "/var/lib/gpuvm/homes/ci", Tag: "gpuvm-home", Binary: "/usr/lib/qemu/virtiofsd"}},
			Metadata:    Metadata{VMID: "vm-tiny", Owner: "ci", Profile: "tiny"},
		},
		// The owner's home and two admin-declared shares: a read-write one
		// from its own directory, a read-only one from gpuvmd's read-only
		// bind mount of it (libvirt 9 refuses <readonly/> on virtiofs, so
		// the domain has none: the host enforces it).
		"linux-home-shares": {
			Name: "gpuvm-tiny-shares", UUID: testUUID, VCPUs: 1, MemoryBytes: 256 << 20,
			DomainType: TypeQEMU,
			Kernel:     "/var/lib/gpuvm/guest/vmlinuz", Initrd: "/var/lib/gpuvm/guest/initrd.img",
			Cmdline: "console=ttyS0 panic=-1",
			Disks:   []Disk{seed},
			Network: Network{Name: "default"},
			Filesystems: []Filesystem{{Source: "/var/lib/gpuvm/homes/ci", Tag: "gpuvm-home"},
				{Source: "/srv/datasets/team", Tag: "gpuvm-share-team"},
				{Source: "/var/lib/gpuvm/shares/imagenet", Tag: "gpuvm-share-imagenet"}},
			Metadata: Metadata{VMID: "vm-tiny", Owner: "ci", Profile: "tiny"},
		},
		// A whole GPU (VFIO: all guest memory pinned) beside the owner's
		// home (virtiofs: guest memory shared with virtiofsd).
		"passthrough-home": {
			Name: "gpuvm-vm-46", UUID: testUUID, VCPUs: 16, MemoryBytes: 64 << 30,
			DomainType:  TypeKVM,
			Disks:       []Disk{overlay, seed},
			Network:     Network{Name: "default"},
			Graphics:    vnc,
			GuestAgent:  true,
			Hostdevs:    []Hostdev{{Type: HostdevPCI, Addresses: []string{"0000:c1:00.0", "0000:c1:00.1"}, Managed: true}},
			Filesystems: []Filesystem{{Source: "/var/lib/gpuvm/homes/carol", Tag: "gpuvm-home"}},
			Metadata:    Metadata{VMID: "vm-46", Owner: "carol", Profile: "train"},
		},
		"windows11": {
			Name: "gpuvm-win11", UUID: testUUID, VCPUs: 8, MemoryBytes: 16 << 30,
			DomainType: TypeKVM,
			Firmware:   Firmware{Type: FirmwareUEFI, SecureBoot: true, TPM: true, NVRAM: "/var/lib/libvirt/qemu/nvram/gpuvm-win11_VARS.fd"},
			OSFamily:   OSWindows,
			Disks: []Disk{
				{Pool: "gpuvm", Volume: "gpuvm-win11.qcow2", BootOrder: 1},
				{Path: "/var/lib/gpuvm/iso/virtio-win.iso", CDROM: true},
				{Pool: "gpuvm", Volume: "gpuvm-win11-seed.iso", CDROM: true},
			},
			Network:    Network{Name: "default", Model: "e1000e"},
			Graphics:   &Graphics{Type: GraphicsVNC, Password: "Win11pw", Port: 5905, WebSocket: 5705},
			GuestAgent: true,
			Hostdevs:   []Hostdev{{Type: HostdevMdev, UUID: mdevUUID, Display: true}},
			Metadata:   Metadata{VMID: "vm-45", Owner: "dave", Profile: "win11-a40-8q"},
		},
	}
}

func goldenPath(name string) string { return filepath.Join("testdata", name+".xml") }

func TestGolden(t *testing.T) {
	for name, spec := range goldenSpecs() {
		t.Run(name, func(t *testing.T) {
			got, err := XML(spec)
			if err != nil {
				t.Fatal(err)
			}
			got += "\n"
			path := goldenPath(name)
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from the built XML (go test -update rewrites it):\n%s", path, diff(string(want), got))
			}

			// Round trip: libvirtxml reads back what it wrote, unchanged.
			var d libvirtxml.Domain
			if err := d.Unmarshal(got); err != nil {
				t.Fatalf("unmarshal: %v", err)
			}
			again, err := d.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if again+"\n" != got {
				t.Errorf("round trip changed the XML:\n%s", diff(got, again+"\n"))
			}
			m, err := MetadataFromDomainXML(got)
			if err != nil || !reflect.DeepEqual(m, spec.Metadata) {
				t.Errorf("metadata read back = %+v, %v; want %+v", m, err, spec.Metadata)
			}
		})
	}
}

// TestGoldenValidates runs libvirt's own schema check on every golden file.
func TestGoldenValidates(t *testing.T) {
	bin, err := exec.LookPath("virt-xml-validate")
	if err != nil {
		t.Skip("virt-xml-validate is missing (Debian: libvirt-clients and libxml2-utils)")
	}
	if _, err := exec.LookPath("xmllint"); err != nil {
		t.Skip("xmllint is missing (Debian: libxml2-utils); virt-xml-validate needs it")
	}
	for name := range goldenSpecs() {
		t.Run(name, func(t *testing.T) {
			out, err := exec.Command(bin, goldenPath(name), "domain").CombinedOutput()
			if err != nil {
				t.Errorf("virt-xml-validate %s: %v\n%s", goldenPath(name), err, out)
			}
		})
	}
}

// diff shows the first differing line of two texts, with context.
func diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return "line " + itoa(i+1) + ":\n  want: " + wl + "\n  got:  " + gl
		}
	}
	return "(no line differs)"
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

func validSpec() Spec {
	return goldenSpecs()["vgpu-mdev"]
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Spec)
		want   string // substring of the error; "" means valid
	}{
		{"valid", func(*Spec) {}, ""},
		{"empty name", func(s *Spec) { s.Name = "" }, "name: is empty"},
		{"name with slash", func(s *Spec) { s.Name = "a/b" }, `name: "a/b" may hold only`},
		{"name with space", func(s *Spec) { s.Name = "my vm" }, "name:"},
		{"name starting with dot", func(s *Spec) { s.Name = ".hidden" }, "name:"},
		{"name too long", func(s *Spec) { s.Name = strings.Repeat("a", 65) }, "at most 64"},
		{"bad uuid", func(s *Spec) { s.UUID = "not-a-uuid" }, `uuid: "not-a-uuid" is not a UUID`},
		{"no vcpus", func(s *Spec) { s.VCPUs = 0 }, "vcpus: 0 is not between 1 and 512"},
		{"too many vcpus", func(s *Spec) { s.VCPUs = 1000 }, "vcpus:"},
		{"tiny memory", func(s *Spec) { s.MemoryBytes = 1 << 20 }, "memory:"},
		{"domain type", func(s *Spec) { s.DomainType = "xen" }, `domain type: "xen"`},
		{"machine", func(s *Spec) { s.Machine = "q35; rm" }, "machine:"},
		{"os family", func(s *Spec) { s.OSFamily = "plan9" }, "os family:"},
		{"secure boot on bios", func(s *Spec) { s.Firmware.SecureBoot = true }, "secure boot: needs UEFI"},
		{"firmware type", func(s *Spec) { s.Firmware.Type = "coreboot" }, "firmware:"},
		{"relative nvram", func(s *Spec) { s.Firmware = Firmware{Type: FirmwareUEFI, NVRAM: "vars.fd"} }, "firmware.nvram:"},
		{"initrd without kernel", func(s *Spec) { s.Initrd = "/boot/initrd" }, "kernel: initrd and cmdline need a kernel"},
		{"relative kernel", func(s *Spec) { s.Kernel = "vmlinuz" }, "kernel:"},
		{"cmdline newline", func(s *Spec) { s.Kernel = "/k"; s.Cmdline = "a\nb" }, "cmdline: holds a control character"},
		{"disk path and volume", func(s *Spec) { s.Disks = []Disk{{Path: "/a", Pool: "p", Volume: "v"}} }, "not both"},
		{"disk nothing", func(s *Spec) { s.Disks = []Disk{{}} }, "disks[0]: needs a path"},
		{"disk relative", func(s *Spec) { s.Disks = []Disk{{Path: "a.qcow2"}} }, "disks[0].path:"},
		{"disk volume slash", func(s *Spec) { s.Disks = []Disk{{Pool: "p", Volume: "../x"}} }, "disks[0].volume:"},
		{"disk format", func(s *Spec) { s.Disks = []Disk{{Path: "/a", Format: "vmdk"}} }, "disks[0].format:"},
		{"cdrom on virtio", func(s *Spec) { s.Disks = []Disk{{Path: "/a.iso", CDROM: true, Bus: BusVirtIO}} }, "a CD-ROM cannot be on virtio"},
		{"disk bus", func(s *Spec) { s.Disks = []Disk{{Path: "/a", Bus: "ide"}} }, "disks[0].bus:"},
		{"network name", func(s *Spec) { s.Network.Name = "bad net" }, "network.name:"},
		{"mac", func(s *Spec) { s.Network.MAC = "52:54:00" }, "network.mac:"},
		{"nic model", func(s *Spec) { s.Network.Model = "ne2k" }, "network.model:"},
		{"mac without network", func(s *Spec) { s.Network = Network{MAC: "52:54:00:00:00:01"} }, "needs a network name"},
		{"vnc password 9", func(s *Spec) { s.Graphics = &Graphics{Type: GraphicsVNC, Password: "123456789"} }, "VNC passwords are at most 8 characters (got 9)"},
		{"vnc password 8", func(s *Spec) { s.Graphics = &Graphics{Type: GraphicsVNC, Password: "12345678"} }, ""},
		{"password with space", func(s *Spec) { s.Graphics = &Graphics{Type: GraphicsVNC, Password: "a b"} }, "printable ASCII"},
		{"password non-ascii", func(s *Spec) { s.Graphics = &Graphics{Type: GraphicsVNC, Password: "pässw"} }, "printable ASCII"},
		{"graphics type", func(s *Spec) { s.Graphics = &Graphics{Type: "rdp"} }, "graphics.type:"},
		{"listen", func(s *Spec) { s.Graphics = &Graphics{Type: GraphicsVNC, Listen: "localhost"} }, "graphics.listen:"},
		{"port", func(s *Spec) { s.Graphics = &Graphics{Type: GraphicsVNC, Port: 80} }, "graphics.port:"},
		{"websocket", func(s *Spec) { s.Graphics = &Graphics{Type: GraphicsVNC, WebSocket: 22} }, "graphics.websocket:"},
		{"websocket same port", func(s *Spec) { s.Graphics = &Graphics{Type: GraphicsVNC, Port: 5901, WebSocket: 5901} }, "also the display port"},
		{"spice websocket", func(s *Spec) { s.Graphics = &Graphics{Type: GraphicsSpice, WebSocket: -1} }, "only VNC has a websocket"},
		{"video", func(s *Spec) { s.Video = "matrox" }, "video:"},
		{"serial log", func(s *Spec) { s.SerialLog = "serial.log" }, "serial log:"},
		{"mdev uuid", func(s *Spec) { s.Hostdevs = []Hostdev{{Type: HostdevMdev, UUID: "x"}} }, "hostdevs[0].uuid:"},
		{"mdev twice", func(s *Spec) {
			s.Hostdevs = []Hostdev{{Type: HostdevMdev, UUID: mdevUUID}, {Type: HostdevMdev, UUID: strings.ToUpper(mdevUUID)}}
		}, "is given twice"},
		{"mdev addresses", func(s *Spec) {
			s.Hostdevs = []Hostdev{{Type: HostdevMdev, UUID: mdevUUID, Addresses: []string{"0000:41:00.0"}}}
		}, "named by its UUID"},
		{"mdev display without graphics", func(s *Spec) { s.Graphics = nil }, "an mdev display needs VNC or SPICE"},
		{"pci no address", func(s *Spec) { s.Hostdevs = []Hostdev{{Type: HostdevPCI}} }, "at least one address"},
		{"pci bad address", func(s *Spec) { s.Hostdevs = []Hostdev{{Type: HostdevPCI, Addresses: []string{"41:00"}}} }, "is not a PCI address"},
		{"pci slot", func(s *Spec) { s.Hostdevs = []Hostdev{{Type: HostdevPCI, Addresses: []string{"0000:41:20.0"}}} }, "above 0x1f"},
		{"pci uuid", func(s *Spec) {
			s.Hostdevs = []Hostdev{{Type: HostdevPCI, UUID: mdevUUID, Addresses: []string{"41:00.0"}}}
		}, "not by a UUID"},
		{"pci display", func(s *Spec) {
			s.Hostdevs = []Hostdev{{Type: HostdevPCI, Display: true, Addresses: []string{"41:00.0"}}}
		}, "only an mdev vGPU"},
		{"pci duplicate", func(s *Spec) {
			s.Hostdevs = []Hostdev{{Type: HostdevPCI, Addresses: []string{"41:00.0"}}, {Type: HostdevPCI, Addresses: []string{"0000:41:00.0"}}}
		}, "0000:41:00.0 is already given as hostdevs[0].addresses[0]"},
		{"hostdev type", func(s *Spec) { s.Hostdevs = []Hostdev{{Type: "usb"}} }, "hostdevs[0].type:"},
		{"no vm id", func(s *Spec) { s.Metadata.VMID = "" }, "metadata.vm id: is empty"},
		{"owner control char", func(s *Spec) { s.Metadata.Owner = "al\x00ice" }, "metadata.owner: holds a control"},
		{"owner invalid utf8", func(s *Spec) { s.Metadata.Owner = "al\xffice" }, "metadata.owner:"},
		{"title long", func(s *Spec) { s.Title = strings.Repeat("x", 300) }, "title:"},
		{"volume pool", func(s *Spec) { s.Metadata.Volumes = []VolumeRef{{Pool: "", Name: "a"}} }, "metadata.volumes[0].pool:"},
		{"volume name", func(s *Spec) { s.Metadata.Volumes = []VolumeRef{{Pool: "p", Name: "a/b"}} }, "metadata.volumes[0].name:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			tt.change(&s)
			err := Validate(s)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if _, err := XML(s); err != nil {
					t.Fatalf("XML: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error, want one containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			var se *SpecError
			if !errors.As(err, &se) || se.Name != s.Name {
				t.Errorf("error %v is not a *SpecError naming %q", err, s.Name)
			}
			if !strings.Contains(err.Error(), "VM \""+s.Name+"\"") && s.Name != "" {
				t.Errorf("error %q does not name the VM", err)
			}
			if _, err := Build(s); err == nil {
				t.Error("Build accepted what Validate refused")
			}
		})
	}
}

func TestValidateListsEveryProblem(t *testing.T) {
	s := validSpec()
	s.VCPUs = 0
	s.UUID = "x"
	s.Graphics.Password = "far-too-long"
	err := Validate(s)
	var se *SpecError
	if !errors.As(err, &se) || len(se.Problems) != 3 {
		t.Fatalf("want 3 problems, got %v", err)
	}
}

// TestEscaping: text from users cannot break out of its element.
func TestEscaping(t *testing.T) {
	s := validSpec()
	s.Title = `Alice's <VM> & "friends" </title><devices>`
	s.Metadata.Owner = `bob</gpuvm:owner><gpuvm:owner>mallory`
	s.Metadata.Profile = `]]><!-- &amp;`
	s.Kernel = "/boot/vmlinuz"
	s.Cmdline = `console=ttyS0 x="<a&b>"`
	s.Graphics.Password = `<&">'x`
	out, err := XML(s)
	if err != nil {
		t.Fatal(err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(out); err != nil {
		t.Fatalf("unmarshal: %v\n%s", err, out)
	}
	if d.Title != s.Title || d.OS.Cmdline != s.Cmdline || d.Devices.Graphics[0].VNC.Passwd != s.Graphics.Password {
		t.Errorf("text changed in the round trip:\n%s", out)
	}
	if len(d.Devices.Hostdevs) != 1 || len(d.Devices.Disks) != 2 {
		t.Errorf("devices changed: %d hostdevs, %d disks", len(d.Devices.Hostdevs), len(d.Devices.Disks))
	}
	m, err := MetadataFromDomainXML(out)
	if err != nil || !reflect.DeepEqual(m, s.Metadata) {
		t.Errorf("metadata = %+v, %v; want %+v", m, err, s.Metadata)
	}
}

func TestHostdevs(t *testing.T) {
	const second = "c0ffee00-0000-4000-8000-000000000002"
	tests := []struct {
		name     string
		hostdevs []Hostdev
		video    string
		check    func(t *testing.T, hs []libvirtxml.DomainHostdev)
	}{
		{
			name:     "mdev display: ramfb on the primary only, emulated video off",
			hostdevs: []Hostdev{{Type: HostdevMdev, UUID: strings.ToUpper(mdevUUID), Display: true}, {Type: HostdevMdev, UUID: second, Display: true}},
			video:    "none",
			check: func(t *testing.T, hs []libvirtxml.DomainHostdev) {
				if len(hs) != 2 {
					t.Fatalf("%d hostdevs", len(hs))
				}
				a, b := hs[0].SubsysMDev, hs[1].SubsysMDev
				if a.Model != "vfio-pci" || a.Display != "on" || a.RamFB != "on" || a.Source.Address.UUID != mdevUUID {
					t.Errorf("first mdev = %+v", a)
				}
				if b.Display != "on" || b.RamFB != "" || b.Source.Address.UUID != second {
					t.Errorf("second mdev = %+v", b)
				}
			},
		},
		{
			name:     "mdev without display",
			hostdevs: []Hostdev{{Type: HostdevMdev, UUID: mdevUUID}},
			video:    "virtio",
			check: func(t *testing.T, hs []libvirtxml.DomainHostdev) {
				if m := hs[0].SubsysMDev; m.Display != "off" || m.RamFB != "" {
					t.Errorf("mdev = %+v", m)
				}
			},
		},
		{
			name:     "vendor VFIO VF: unmanaged",
			hostdevs: []Hostdev{{Type: HostdevPCI, Addresses: []string{"0000:41:00.4"}}},
			video:    "virtio",
			check: func(t *testing.T, hs []libvirtxml.DomainHostdev) {
				a := hs[0].SubsysPCI.Source.Address
				if hs[0].Managed != "no" || *a.Domain != 0 || *a.Bus != 0x41 || *a.Slot != 0 || *a.Function != 4 {
					t.Errorf("VF hostdev = %+v %+v", hs[0], a)
				}
			},
		},
		{
			name:     "passthrough: every function managed",
			hostdevs: []Hostdev{{Type: HostdevPCI, Managed: true, Addresses: []string{"0001:c1:00.0", "c1:00.1"}}},
			video:    "virtio",
			check: func(t *testing.T, hs []libvirtxml.DomainHostdev) {
				if len(hs) != 2 {
					t.Fatalf("%d hostdevs", len(hs))
				}
				for i, want := range []struct{ dom, fn uint }{{1, 0}, {0, 1}} {
					a := hs[i].SubsysPCI.Source.Address
					if hs[i].Managed != "yes" || *a.Domain != want.dom || *a.Bus != 0xc1 || *a.Function != want.fn {
						t.Errorf("hostdev %d = managed %q %+v", i, hs[i].Managed, a)
					}
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validSpec()
			s.Hostdevs = tt.hostdevs
			d, err := Build(s)
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, d.Devices.Hostdevs)
			if got := d.Devices.Videos[0].Model.Type; got != tt.video {
				t.Errorf("video %q, want %q", got, tt.video)
			}
			if d.Devices.MemBalloon.Model != "none" {
				t.Errorf("balloon %q with a GPU, want none", d.Devices.MemBalloon.Model)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	s := goldenSpecs()["linux-tiny"]
	s.DomainType = TypeKVM
	s.Graphics = nil
	s.Disks = []Disk{{Path: "/a.qcow2"}, {Path: "/b.iso", CDROM: true}, {Path: "/c.raw", Format: FormatRaw, Bus: BusSCSI}}
	d, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	if d.Type != "kvm" || d.OS.Type.Machine != "q35" || d.CPU == nil || d.CPU.Mode != "host-passthrough" {
		t.Errorf("type %q machine %q cpu %+v", d.Type, d.OS.Type.Machine, d.CPU)
	}
	if d.Devices.Videos[0].Model.Type != "none" || len(d.Devices.Graphics) != 0 {
		t.Errorf("no graphics: video %q", d.Devices.Videos[0].Model.Type)
	}
	want := []struct{ dev, bus, format, device string }{
		{"vda", "virtio", "qcow2", "disk"}, {"sda", "sata", "raw", "cdrom"}, {"sdb", "scsi", "raw", "disk"},
	}
	for i, w := range want {
		dd := d.Devices.Disks[i]
		if dd.Target.Dev != w.dev || dd.Target.Bus != w.bus || dd.Driver.Type != w.format || dd.Device != w.device {
			t.Errorf("disk %d: %s %s %s %s, want %+v", i, dd.Target.Dev, dd.Target.Bus, dd.Driver.Type, dd.Device, w)
		}
	}
	if len(d.Devices.Controllers) != 1 || d.Devices.Controllers[0].Model != "virtio-scsi" {
		t.Errorf("controllers %+v", d.Devices.Controllers)
	}
	if d.Memory.Value != 256<<10 || d.Memory.Unit != "KiB" {
		t.Errorf("memory %d %s", d.Memory.Value, d.Memory.Unit)
	}
}

// TestBuildNeedsDomainType: Build never assumes KVM. An empty domain type is
// refused, with the way to get one, beside any other problem; Validate
// accepts it (CreateVM fills it from the accelerator check).
func TestBuildNeedsDomainType(t *testing.T) {
	const want = "domain type: not set: take it from the connection's accelerator check (hypervisor.Conn.Accel)"
	tests := []struct {
		name  string
		edit  func(*Spec)
		errs  []string // substrings of Build's error; none: it builds
		typ   string   // the built domain's type
		valid bool     // what Validate says
	}{
		{"empty type", func(s *Spec) { s.DomainType = "" }, []string{want}, "", true},
		{"empty type and a bad name", func(s *Spec) { s.DomainType = ""; s.Name = "a b" }, []string{want, "name:"}, "", false},
		{"empty windows", func(s *Spec) { s.DomainType = ""; s.OSFamily = OSWindows }, []string{want}, "", true},
		{"kvm", func(s *Spec) { s.DomainType = TypeKVM }, nil, "kvm", true},
		{"qemu", func(s *Spec) { s.DomainType = TypeQEMU }, nil, "qemu", true},
		{"xen", func(s *Spec) { s.DomainType = "xen" }, []string{`domain type: "xen"`}, "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := validSpec()
			tc.edit(&s)
			if err := Validate(s); (err == nil) != tc.valid {
				t.Errorf("Validate: %v, want valid=%v", err, tc.valid)
			}
			d, err := Build(s)
			_, xerr := XML(s)
			if len(tc.errs) == 0 {
				if err != nil || xerr != nil {
					t.Fatalf("Build: %v; XML: %v", err, xerr)
				}
				if d.Type != tc.typ {
					t.Errorf("type %q, want %q", d.Type, tc.typ)
				}
				return
			}
			var se *SpecError
			if !errors.As(err, &se) || xerr == nil {
				t.Fatalf("Build: %v; XML: %v; want a *SpecError", err, xerr)
			}
			for _, w := range tc.errs {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Build: %v, want it to name %q", err, w)
				}
			}
		})
	}
}

func TestParsePCIAddress(t *testing.T) {
	tests := []struct {
		in   string
		want string
		ok   bool
	}{
		{"0000:41:00.4", "0000:41:00.4", true},
		{"41:00.4", "0000:41:00.4", true},
		{"0001:C1:1F.7", "0001:c1:1f.7", true},
		{"0000:41:00.8", "", false},
		{"0000:41:00", "", false},
		{"", "", false},
		{"zz:00.0", "", false},
	}
	for _, tt := range tests {
		a, err := ParsePCIAddress(tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("%q: err %v", tt.in, err)
			continue
		}
		if tt.ok && a.String() != tt.want {
			t.Errorf("%q = %s, want %s", tt.in, a, tt.want)
		}
	}
}

func TestParseMetadata(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want Metadata
		err  error
	}{
		{"as written", `<gpuvm:vm xmlns:gpuvm="https://gpuvm.dev/xmlns/domain/1"><gpuvm:id>vm-1</gpuvm:id><gpuvm:owner>a&amp;b</gpuvm:owner></gpuvm:vm>`, Metadata{VMID: "vm-1", Owner: "a&b"}, nil},
		{"volumes", `<gpuvm:vm xmlns:gpuvm="https://gpuvm.dev/xmlns/domain/1"><gpuvm:id>v</gpuvm:id><gpuvm:volume pool="p">a.qcow2</gpuvm:volume><gpuvm:volume pool="p">a.iso</gpuvm:volume></gpuvm:vm>`,
			Metadata{VMID: "v", Volumes: []VolumeRef{{"p", "a.qcow2"}, {"p", "a.iso"}}}, nil},
		{"other prefix", `<g:vm xmlns:g="https://gpuvm.dev/xmlns/domain/1"><g:id>vm-2</g:id><g:profile>p</g:profile></g:vm>`, Metadata{VMID: "vm-2", Profile: "p"}, nil},
		{"default namespace", `<vm xmlns="https://gpuvm.dev/xmlns/domain/1"><id>vm-3</id></vm>`, Metadata{VMID: "vm-3"}, nil},
		{"as libvirt returns it", "<vm>\n  <id>vm-5</id>\n  <owner>a</owner>\n</vm>\n", Metadata{VMID: "vm-5", Owner: "a"}, nil},
		{"installation", "<vm>\n  <installation>0f6f1a52-9a40-4c3e-8d7e-2b1f3c4d5e6f</installation>\n  <id>vm-6</id>\n</vm>\n",
			Metadata{Installation: "0f6f1a52-9a40-4c3e-8d7e-2b1f3c4d5e6f", VMID: "vm-6"}, nil},
		{"other element", `<other><id>x</id></other>`, Metadata{}, ErrNotGpuvm},
		{"other namespace", `<x:vm xmlns:x="https://example.com/ns"><x:id>vm-4</x:id></x:vm>`, Metadata{}, ErrNotGpuvm},
		{"empty", "", Metadata{}, ErrNotGpuvm},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := ParseMetadata(tt.in)
			if !errors.Is(err, tt.err) || !reflect.DeepEqual(m, tt.want) {
				t.Errorf("= %+v, %v; want %+v, %v", m, err, tt.want, tt.err)
			}
		})
	}
	if _, err := MetadataFromDomainXML(`<domain type="test"><name>x</name></domain>`); !errors.Is(err, ErrNotGpuvm) {
		t.Errorf("domain without metadata: %v", err)
	}
	if _, err := MetadataFromDomainXML(`<domain><metadata><other xmlns="urn:x"/></metadata></domain>`); !errors.Is(err, ErrNotGpuvm) {
		t.Errorf("domain with foreign metadata: %v", err)
	}
}

func TestConsoleFromXML(t *testing.T) {
	tests := []struct {
		name string
		xml  string
		want Console
		err  error
	}{
		{"vnc with websocket",
			`<domain><devices><graphics type="vnc" port="5901" autoport="yes" websocket="5701" listen="127.0.0.1" passwd="pw"><listen type="address" address="127.0.0.1"/></graphics></devices></domain>`,
			Console{Protocol: GraphicsVNC, Host: "127.0.0.1", Port: 5901, WebSocketPort: 5701, Password: "pw"}, nil},
		{"spice",
			`<domain><devices><graphics type="spice" port="5902" autoport="yes" listen="0.0.0.0"><listen type="address" address="0.0.0.0"/></graphics></devices></domain>`,
			Console{Protocol: GraphicsSpice, Host: "0.0.0.0", Port: 5902}, nil},
		{"not running", `<domain><devices><graphics type="vnc" port="-1" autoport="yes"/></devices></domain>`, Console{}, ErrNoConsole},
		{"no graphics", `<domain><devices></devices></domain>`, Console{}, ErrNoConsole},
		{"no devices", `<domain></domain>`, Console{}, ErrNoConsole},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ConsoleFromXML(tt.xml)
			if !errors.Is(err, tt.err) || c != tt.want {
				t.Errorf("= %+v, %v; want %+v, %v", c, err, tt.want, tt.err)
			}
		})
	}
	if _, err := ConsoleFromXML("<domain"); err == nil {
		t.Error("broken XML accepted")
	}
}

// TestPureGo: the CLI renders domains with CGO_ENABLED=0, so this package
// must not depend on libvirt's C library.
func TestPureGo(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go tool not found")
	}
	cmd := exec.Command(goBin, "list", "-deps", ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps with CGO_ENABLED=0: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if dep == "libvirt.org/go/libvirt" || dep == "runtime/cgo" || strings.HasPrefix(dep, "github.com/gpuvm/gpuvm/pkg/backend") {
			t.Errorf("depends on %s", dep)
		}
	}
}

// DisplayPassword reads the password of a shut-off domain too (no port).
func TestDisplayPassword(t *testing.T) {
	for _, tc := range []struct{ name, xml, want string }{
		{"vnc, shut off", `<domain><devices><graphics type="vnc" port="-1" autoport="yes" passwd="s3cr3t!x"/></devices></domain>`, "s3cr3t!x"},
		{"spice", `<domain><devices><graphics type="spice" passwd="pw"/></devices></domain>`, "pw"},
		{"no password", `<domain><devices><graphics type="vnc" port="5900"/></devices></domain>`, ""},
		{"no display", `<domain><devices></devices></domain>`, ""},
		{"not XML", `<domain`, ""},
	} {
		if got := DisplayPassword(tc.xml); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
