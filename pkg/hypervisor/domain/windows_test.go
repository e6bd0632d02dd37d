package domain

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"libvirt.org/go/libvirtxml"
)

func windowsInstalls() map[string]WindowsInstall {
	base := WindowsInstall{
		Name: "gpuvm-win11-install", UUID: testUUID, VCPUs: 4, MemoryBytes: 8 << 30,
		DomainType: TypeKVM,
		Disk:       Disk{Pool: "gpuvm", Volume: "win11-build.qcow2"},
		Installer:  Disk{Path: "/var/lib/gpuvm/iso/Win11_24H2_English_x64.iso"},
		VirtIO:     Disk{Path: "/var/lib/gpuvm/iso/virtio-win-0.1.262.iso"},
		Media:      Disk{Pool: "gpuvm", Volume: "win11-build-media.iso"},
		Network:    Network{Name: "default"},
		Graphics:   &Graphics{Type: GraphicsVNC},
		Metadata:   Metadata{VMID: "image-win11-build", Owner: "admin", Volumes: []VolumeRef{{Pool: "gpuvm", Name: "win11-build.qcow2"}, {Pool: "gpuvm", Name: "win11-build-media.iso"}}},
	}
	hidden := base
	hidden.Name = "gpuvm-win10-hidden"
	hidden.InsecureBoot = true
	hidden.HideHypervisor = true
	hidden.Hostdevs = []Hostdev{{Type: HostdevPCI, Addresses: []string{"0000:c1:00.0", "0000:c1:00.1"}, Managed: true}}
	return map[string]WindowsInstall{"windows-install": base, "windows-install-hidden": hidden}
}

func TestWindowsInstallGolden(t *testing.T) {
	for name, w := range windowsInstalls() {
		t.Run(name, func(t *testing.T) {
			got, err := WindowsInstallXML(w)
			if err != nil {
				t.Fatal(err)
			}
			got += "\n"
			path := goldenPath(name)
			if *update {
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs (go test -update rewrites it):\n%s", path, diff(string(want), got))
			}

			var d libvirtxml.Domain
			if err := d.Unmarshal(got); err != nil {
				t.Fatal(err)
			}
			secure := d.OS.Loader != nil && d.OS.Loader.Secure == "yes"
			if d.OS.Firmware != "efi" || secure == w.InsecureBoot {
				t.Errorf("firmware %q loader %+v", d.OS.Firmware, d.OS.Loader)
			}
			if !w.InsecureBoot && (d.Features.SMM == nil || d.Features.SMM.State != "on") {
				t.Error("secure boot without SMM")
			}
			if len(d.Devices.TPMs) != 1 || d.Devices.TPMs[0].Backend.Emulator == nil || d.Devices.TPMs[0].Backend.Emulator.Version != "2.0" {
				t.Errorf("TPM = %+v", d.Devices.TPMs)
			}
			hv := d.Features.HyperV
			if hv == nil {
				t.Fatal("no Hyper-V enlightenments")
			}
			for name, f := range map[string]*libvirtxml.DomainFeatureState{
				"relaxed": hv.Relaxed, "vapic": hv.VAPIC, "spinlocks": &hv.Spinlocks.DomainFeatureState, "vpindex": hv.VPIndex,
				"synic": hv.Synic, "stimer": &hv.STimer.DomainFeatureState, "reset": hv.Reset, "frequencies": hv.Frequencies,
			} {
				if f == nil || f.State != "on" {
					t.Errorf("hyperv %s not on", name)
				}
			}
			if w.HideHypervisor {
				if d.Features.KVM == nil || d.Features.KVM.Hidden.State != "on" || hv.VendorId == nil || hv.VendorId.Value != DefaultVendorID {
					t.Errorf("hidden hypervisor: kvm %+v vendor %+v", d.Features.KVM, hv.VendorId)
				}
			} else if d.Features.KVM != nil || hv.VendorId != nil {
				t.Error("hypervisor hidden without HideHypervisor")
			}
			var cds, boot []string
			for _, disk := range d.Devices.Disks {
				if disk.Device == "cdrom" {
					cds = append(cds, disk.Target.Bus)
				}
				if disk.Boot != nil {
					boot = append(boot, disk.Device+"="+itoa(int(disk.Boot.Order)))
				}
			}
			if strings.Join(cds, ",") != "sata,sata,sata" {
				t.Errorf("CD-ROMs on %v, want three on sata", cds)
			}
			if strings.Join(boot, ",") != "disk=1,cdrom=2" {
				t.Errorf("boot order %v", boot)
			}
			if d.Devices.Disks[0].Target.Bus != "virtio" || d.Devices.Interfaces[0].Model.Type != "virtio" {
				t.Error("system disk or NIC not virtio")
			}
			if len(d.Devices.Channels) == 0 || d.Devices.Channels[0].Target.VirtIO.Name != guestAgentChannel {
				t.Error("no guest agent channel")
			}
		})
	}
}

func TestWindowsInstallValidate(t *testing.T) {
	good := windowsInstalls()["windows-install"]
	for _, tc := range []struct {
		name string
		edit func(*WindowsInstall)
		want string
	}{
		{"no installer", func(w *WindowsInstall) { w.Installer = Disk{} }, "installer ISO: missing"},
		{"no virtio", func(w *WindowsInstall) { w.VirtIO = Disk{} }, "virtio-win ISO: missing"},
		{"no media", func(w *WindowsInstall) { w.Media = Disk{} }, "install medium: missing"},
		{"no disk", func(w *WindowsInstall) { w.Disk = Disk{} }, "disk: missing"},
		{"vendor without hiding", func(w *WindowsInstall) { w.VendorID = "abc" }, "needs HideHypervisor"},
		{"long vendor", func(w *WindowsInstall) { w.HideHypervisor = true; w.VendorID = "0123456789abc" }, "1 to 12"},
		{"vendor punctuation", func(w *WindowsInstall) { w.HideHypervisor = true; w.VendorID = "a'b" }, "letters and digits"},
		{"relative ISO", func(w *WindowsInstall) { w.Installer = Disk{Path: "win.iso"} }, "disk"},
		{"bad name", func(w *WindowsInstall) { w.Name = "a b" }, "name"},
		{"no domain type", func(w *WindowsInstall) { w.DomainType = "" }, "domain type: not set"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := good
			tc.edit(&w)
			_, err := WindowsInstallXML(w)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %q", err, tc.want)
			}
		})
	}
}

// TestWindowsInstallValidates runs libvirt's schema check on the goldens.
func TestWindowsInstallValidates(t *testing.T) {
	bin, err := exec.LookPath("virt-xml-validate")
	if err != nil {
		t.Skip("virt-xml-validate is missing (Debian: libvirt-clients)")
	}
	if _, err := exec.LookPath("xmllint"); err != nil {
		t.Skip("xmllint is missing (Debian: libxml2-utils)")
	}
	for name := range windowsInstalls() {
		if out, err := exec.Command(bin, goldenPath(name), "domain").CombinedOutput(); err != nil {
			t.Errorf("virt-xml-validate %s: %v\n%s", goldenPath(name), err, out)
		}
	}
}

// TestWindowsInstallDefinesOnTestDriver defines each install domain on
// libvirt's test:///default driver (virsh; the driver lives in the one
// connection, so define and dumpxml run in one virsh session).
func TestWindowsInstallDefinesOnTestDriver(t *testing.T) {
	virsh, err := exec.LookPath("virsh")
	if err != nil {
		t.Skip("virsh is missing (Debian: libvirt-clients)")
	}
	dir := t.TempDir()
	for name, w := range windowsInstalls() {
		t.Run(name, func(t *testing.T) {
			x, err := WindowsInstallXML(w)
			if err != nil {
				t.Fatal(err)
			}
			// The test driver has no storage pool "gpuvm": give it files.
			x = strings.ReplaceAll(x, `<source pool="gpuvm" volume="win11-build.qcow2"></source>`, `<source file="/var/lib/gpuvm/win11-build.qcow2"></source>`)
			x = strings.ReplaceAll(x, `<source pool="gpuvm" volume="win11-build-media.iso"></source>`, `<source file="/var/lib/gpuvm/win11-build-media.iso"></source>`)
			f := filepath.Join(dir, name+".xml")
			if err := os.WriteFile(f, []byte(x), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(virsh, "-q", "-c", "test:///default", "define "+f+" ; dumpxml "+w.Name).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "<name>"+w.Name+"</name>") {
				t.Fatalf("virsh define: %v\n%s", err, out)
			}
			got := string(out)
			for _, want := range []string{"<tpm model='tpm-crb'>", "<backend type='emulator' version='2.0'", "<hyperv mode='custom'>", "<stimer state='on'", "device='cdrom'", "Win11_24H2_English_x64.iso", "virtio-win-0.1.262.iso"} {
				if !strings.Contains(got, want) {
					t.Errorf("defined domain lacks %s", want)
				}
			}
			if w.HideHypervisor && (!strings.Contains(got, "<hidden state='on'/>") || !strings.Contains(got, "value='"+DefaultVendorID+"'")) {
				t.Error("defined domain lost the hidden hypervisor")
			}
		})
	}
}

// QEMU's software emulation refuses Hyper-V enlightenments (seen: "kernel
// doesn't allow setting HyperV VP_INDEX" on libvirt 9.0/QEMU 7.2), so a
// type='qemu' Windows domain has none, nor the Hyper-V clock.
func TestWindowsInstallSoftwareEmulation(t *testing.T) {
	w := windowsInstalls()["windows-install"]
	w.DomainType = TypeQEMU
	x, err := WindowsInstallXML(w)
	if err != nil {
		t.Fatal(err)
	}
	var d libvirtxml.Domain
	if err := d.Unmarshal(x); err != nil {
		t.Fatal(err)
	}
	if d.Features.HyperV != nil || strings.Contains(x, "hypervclock") {
		t.Errorf("type=qemu domain has Hyper-V enlightenments:\n%s", x)
	}
	if len(d.Devices.TPMs) != 1 || d.OS.Loader == nil || d.OS.Loader.Secure != "yes" {
		t.Error("type=qemu domain lost its TPM or Secure Boot")
	}
	w.HideHypervisor = true
	if x, err = WindowsInstallXML(w); err != nil || !strings.Contains(x, "<hidden state=\"on\">") || strings.Contains(x, "vendor_id") {
		t.Errorf("hidden hypervisor under emulation: %v\n%s", err, x)
	}
}
