package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
	"github.com/gpuvm/gpuvm/pkg/hypervisor/domain"
	"github.com/gpuvm/gpuvm/pkg/windows"
)

// attachWindowsInstall puts "windows-install" under admin's "image" command,
// making that command when no other file has (the image commands live in
// images.go).
func attachWindowsInstall(admin *cobra.Command, co *clientOpts) {
	var image *cobra.Command
	for _, c := range admin.Commands() {
		if c.Name() == "image" {
			image = c
		}
	}
	if image == nil {
		image = &cobra.Command{Use: "image", Short: "Build and manage the images VMs are made from"}
		admin.AddCommand(image)
	}
	image.AddCommand(newWindowsInstallCmd(co), newWindowsTaskRunnerCmd())
}

// newWindowsTaskRunnerCmd is `gpuvm admin image windows-task-runner`: the
// Windows guests' task runner, rendered offline, for an image an admin
// makes without windows-install.
func newWindowsTaskRunnerCmd() *cobra.Command {
	var tmplDir, output string
	cmd := &cobra.Command{
		Use:   "windows-task-runner [--templates DIR] [-o FILE]",
		Short: "Print the task runner of Windows guests (gpuvm-task.ps1), to bake into an image",
		Long: `Prints gpuvm-task.ps1, the task runner of Windows guests, rendered from
templates/windows/gpuvm-task.ps1.tmpl (--templates DIR overrides it), to
stdout or to -o FILE. Nothing is asked of gpuvmd.

Images that 'gpuvm admin image windows-install' builds have it already: their
first logon copies it to C:\ProgramData\gpuvm\gpuvm-task.ps1 and registers the
scheduled task gpuvm-task that runs it at every start as SYSTEM. For an image
made another way, do the same in the image (docs/tasks.md, "Windows guests",
has the commands). The runner holds nothing of any task: it reads the task
from gpuvm-task.json on a drive's root, and exits where there is none.
` + exitHelp,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var tmpls fs.FS // the built-in template
			if tmplDir != "" {
				if st, err := os.Stat(tmplDir); err != nil || !st.IsDir() {
					return usageError{fmt.Errorf("windows-task-runner: --templates %s: not a directory", tmplDir)}
				}
				tmpls = os.DirFS(tmplDir)
			}
			b, err := windows.TaskRunner(tmpls)
			if err != nil {
				return fmt.Errorf("windows-task-runner: %w", err)
			}
			if output == "" {
				_, err = cmd.OutOrStdout().Write(b)
				return err
			}
			if err := writeFileMode(output, b, 0o644); err != nil {
				return fmt.Errorf("windows-task-runner: -o: %w", err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&tmplDir, "templates", "", "directory overriding templates/windows (gpuvm-task.ps1.tmpl)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "write to FILE instead of stdout")
	return cmd
}

type windowsInstallOpts struct {
	iso, virtio, name, edition, render      string
	imageName, productKeyFile, passwordFile string
	user, computer, locale, inputLocale, tz string
	nvidiaDriver, nvidiaArgs, cloudbase     string
	winfsp                                  string
	licensing, disk, network, templates     string
	domainType, gpuMdev                     string
	gpuPCI                                  []string
	imageIndex                              int
	vcpus, memoryGiB, diskGiB               uint
	noSysprep, insecureBoot, hide, wait     bool
	poll                                    time.Duration
	out                                     outputOpts
}

func newWindowsInstallCmd(co *clientOpts) *cobra.Command {
	var o windowsInstallOpts
	cmd := &cobra.Command{
		Use:   "windows-install --iso PATH --virtio-win PATH --name NAME --password-file PATH [--wait | --render DIR]",
		Short: "Start an unattended Windows install on gpuvmd, or render its files (--render)",
		Long: `Starts an unattended install of Windows 10, 11 or Server 2022 on gpuvmd
(POST /v1/admin/images/windows-install): gpuvmd renders the answer file,
makes an empty qcow2 disk (--disk-gib, default 64) and the install medium in
its storage pool, defines the install VM and starts it. Every path is on the
gpuvmd host (absolute), where gpuvmd reads them. A refusal (a file missing,
an empty password file, the name taken) makes nothing, and a failure half-way
removes what was made. The install VM then runs Setup and the first logon
with nobody at the console; sysprep shuts it down. --wait follows it (every
--poll) until it is shut off and prints the command that stores its disk as
an image. Without --wait, follow it with --wait again (a name taken says so)
or GET /v1/admin/images/windows-install/NAME.

gpuvmd gives the install VM the domain type its accelerator check chose (kvm,
or qemu where KVM is missing or unusable); --domain-type kvm is refused where
KVM is unusable, with the reason.

With --render DIR nothing is asked of gpuvmd: the command writes everything
the install needs into DIR, for an admin to inspect and start with virsh.
Nothing here knows whether that host can use KVM: --render needs
--domain-type.

  autounattend.xml       the answer file (templates/windows/autounattend.xml.tmpl):
                         locale, UEFI/GPT disk, the virtio-win storage driver, the
                         image, RDP with NLA, the local admin, no OOBE questions
  gpuvm-firstlogon.ps1   what the first logon runs: virtio-win guest tools and the
                         QEMU guest agent, cloudbase-init (--cloudbase-init), WinFsp
                         and the home's mount (--winfsp), the NVIDIA guest driver
                         (--nvidia-driver), the licensing task, the task runner and
                         its scheduled task gpuvm-task, then sysprep /generalize
                         /oobe /shutdown (unless --no-sysprep)
  gpuvm-task.ps1         the task runner of Windows guests (docs/tasks.md)
  gpuvm-mounts.ps1       with --winfsp: mounts the VM's home on H: at every start
  NAME-media.iso         the install medium: the files above and the installers
  NAME.xml               the libvirt domain: UEFI with Secure Boot, TPM 2.0, Hyper-V
                         enlightenments, virtio disk and NIC, three CD-ROMs (--iso,
                         --virtio-win, the medium)

The admin password is read from --password-file (one trailing newline is
dropped) and written into autounattend.xml and the medium only, both mode 0600;
it is never printed. --templates DIR overrides the built-in templates.

All paths are on the gpuvmd host. Starting the install and turning the disk
into an image are the steps printed at the end (docs/windows.md). --templates
and --disk work with --render only.

Output: lines by default; --json prints the api.WindowsInstall (the last one
with --wait).
` + exitHelp,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.render != "" {
				return runWindowsInstall(o, cmd.OutOrStdout())
			}
			return co.runE(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
				return startWindowsInstall(ctx, c, o, cmd.OutOrStdout(), cmd.ErrOrStderr())
			})(cmd, args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.iso, "iso", "", "the Windows installer ISO (required)")
	f.StringVar(&o.virtio, "virtio-win", "", "the virtio-win drivers ISO (required)")
	f.StringVar(&o.name, "name", "", "name of the install VM and its files (required)")
	f.StringVar(&o.render, "render", "", "write the files to this directory instead of asking gpuvmd to start the install")
	f.BoolVar(&o.wait, "wait", false, "wait until the install VM has shut itself off (sysprep)")
	f.DurationVar(&o.poll, "poll", 30*time.Second, "how often --wait asks for the install VM's state")
	f.UintVar(&o.diskGiB, "disk-gib", 64, "size of the system disk gpuvmd makes, GiB")
	o.out.flags(cmd, "")
	f.StringVar(&o.passwordFile, "password-file", "", "file holding the local admin's password (required)")
	f.StringVar(&o.edition, "edition", string(windows.Windows11), "windows10, windows11 or server2022")
	f.IntVar(&o.imageIndex, "image-index", 0, "index of the image in the ISO's install.wim (default 1)")
	f.StringVar(&o.imageName, "image-name", "", `name of the image in install.wim ("Windows 11 Pro"), instead of --image-index`)
	f.StringVar(&o.productKeyFile, "product-key-file", "", "file holding the product key (optional)")
	f.StringVar(&o.user, "user", "", "the local admin's name (default gpuvm)")
	f.StringVar(&o.computer, "computer-name", "", "the computer name (default gpuvm-win)")
	f.StringVar(&o.locale, "locale", "", "UI, system and user locale (default en-US)")
	f.StringVar(&o.inputLocale, "input-locale", "", "keyboard (default: --locale)")
	f.StringVar(&o.tz, "timezone", "", `Windows time zone ID (default "UTC")`)
	f.StringVar(&o.nvidiaDriver, "nvidia-driver", "", "the NVIDIA guest driver installer (.exe) to put on the medium")
	f.StringVar(&o.nvidiaArgs, "nvidia-args", "", `the installer's arguments, space-separated (default "-s -noreboot")`)
	f.StringVar(&o.cloudbase, "cloudbase-init", "", "the cloudbase-init MSI to put on the medium")
	f.StringVar(&o.winfsp, "winfsp", "", "WinFsp's MSI to put on the medium: the image's VMs then mount their owner's home on H: (docs/windows.md)")
	f.StringVar(&o.licensing, "licensing-script", "", "a gpuvm-licensing.ps1 to run at first logon (it stays in the image)")
	f.BoolVar(&o.noSysprep, "no-sysprep", false, "leave the installed VM running instead of generalizing and shutting it down")
	f.StringVar(&o.disk, "disk", "", "with --render: the system disk, a qcow2 file to create (default /var/lib/libvirt/images/NAME.qcow2)")
	f.StringVar(&o.network, "network", "default", "libvirt network of the NIC")
	f.UintVar(&o.vcpus, "vcpus", 4, "virtual CPUs")
	f.UintVar(&o.memoryGiB, "memory-gib", 8, "memory in GiB")
	f.BoolVar(&o.insecureBoot, "insecure-boot", false, "UEFI without Secure Boot (not for Windows 11)")
	f.BoolVar(&o.hide, "hide-hypervisor", false, "hide KVM and set a Hyper-V vendor ID (GeForce drivers before R465)")
	f.StringVar(&o.templates, "templates", "", "with --render: directory overriding templates/windows")
	f.StringVar(&o.domainType, "domain-type", "", "kvm, or qemu (software emulation, where KVM is unusable); default: gpuvmd's choice (its accelerator check). Required with --render")
	f.StringVar(&o.gpuMdev, "gpu-mdev", "", "UUID of an existing vGPU (mdev) to give the install VM, so that the NVIDIA installer finds its device")
	f.StringSliceVar(&o.gpuPCI, "gpu-pci", nil, "PCI functions (0000:c1:00.0,...) to pass through to the install VM instead (libvirt binds vfio-pci)")
	return cmd
}

func runWindowsInstall(o windowsInstallOpts, stdout io.Writer) error {
	for _, r := range []struct{ flag, v string }{{"--iso", o.iso}, {"--virtio-win", o.virtio}, {"--name", o.name}, {"--render", o.render}, {"--password-file", o.passwordFile}} {
		if r.v == "" {
			return usageError{fmt.Errorf("windows-install: %s is required", r.flag)}
		}
	}
	if err := domain.ValidName(o.name); err != nil {
		return usageError{fmt.Errorf("windows-install: --name: %w", err)}
	}
	pw, err := readSecret(o.passwordFile)
	if err != nil {
		return fmt.Errorf("windows-install: --password-file: %w", err)
	}
	c := windows.Config{
		Edition: windows.Edition(o.edition), ComputerName: o.computer, AdminUser: o.user, AdminPassword: pw,
		Locale: o.locale, InputLocale: o.inputLocale, TimeZone: o.tz,
		Image: windows.Image{Index: o.imageIndex, Name: o.imageName}, Sysprep: !o.noSysprep,
	}
	if o.productKeyFile != "" {
		if c.ProductKey, err = readSecret(o.productKeyFile); err != nil {
			return fmt.Errorf("windows-install: --product-key-file: %w", err)
		}
	}
	var extra []windows.MediaFile
	addFile := func(flag, path string) (string, error) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("windows-install: %s: %w", flag, err)
		}
		extra = append(extra, windows.MediaFile{Name: filepath.Base(path), Data: b})
		return filepath.Base(path), nil
	}
	if o.cloudbase != "" {
		if c.CloudbaseInitMSI, err = addFile("--cloudbase-init", o.cloudbase); err != nil {
			return err
		}
	}
	if o.winfsp != "" {
		if c.WinFspMSI, err = addFile("--winfsp", o.winfsp); err != nil {
			return err
		}
	}
	if o.nvidiaDriver != "" {
		if c.NVIDIADriver, err = addFile("--nvidia-driver", o.nvidiaDriver); err != nil {
			return err
		}
		c.NVIDIADriverArgs = strings.Fields(o.nvidiaArgs)
	} else if o.nvidiaArgs != "" {
		return usageError{fmt.Errorf("windows-install: --nvidia-args needs --nvidia-driver")}
	}
	if o.licensing != "" {
		if filepath.Base(o.licensing) != windows.LicensingScript {
			return usageError{fmt.Errorf("windows-install: --licensing-script: the file must be named %s", windows.LicensingScript)}
		}
		if _, err := addFile("--licensing-script", o.licensing); err != nil {
			return err
		}
	}
	if err := c.Validate(); err != nil {
		return usageError{err}
	}
	if o.domainType == "" {
		// Nothing here knows the gpuvmd host's KVM: never assume it.
		return usageError{fmt.Errorf("windows-install: --render needs --domain-type: kvm where the host that runs the install can use KVM (gpuvmd doctor's kvm check says), else qemu (software emulation)")}
	}
	var tmpls fs.FS // the built-in templates
	if o.templates != "" {
		tmpls = os.DirFS(o.templates)
	}
	files, err := windows.Render(c, tmpls)
	if err != nil {
		return err
	}
	iso, err := windows.Media(c, tmpls, extra, time.Now().UTC())
	if err != nil {
		return err
	}

	dir, err := filepath.Abs(o.render)
	if err != nil {
		return fmt.Errorf("windows-install: --render: %w", err)
	}
	disk := o.disk
	if disk == "" {
		disk = "/var/lib/libvirt/images/" + o.name + ".qcow2"
	}
	media := filepath.Join(dir, o.name+"-media.iso")
	abs := func(p string) string {
		if a, err := filepath.Abs(p); err == nil {
			return a
		}
		return p
	}
	w := domain.WindowsInstall{
		Name: o.name, UUID: uuid.NewString(), Title: "gpuvm: unattended install of " + c.Edition.Label(),
		VCPUs: o.vcpus, MemoryBytes: uint64(o.memoryGiB) << 30, DomainType: domain.Type(o.domainType),
		Disk:      domain.Disk{Path: abs(disk)},
		Installer: domain.Disk{Path: abs(o.iso)}, VirtIO: domain.Disk{Path: abs(o.virtio)}, Media: domain.Disk{Path: media},
		Network:      domain.Network{Name: o.network},
		Graphics:     &domain.Graphics{Type: domain.GraphicsVNC},
		InsecureBoot: o.insecureBoot, HideHypervisor: o.hide,
		Metadata: domain.Metadata{VMID: "windows-install-" + o.name, Profile: "windows-install"},
	}
	switch {
	case o.gpuMdev != "" && len(o.gpuPCI) > 0:
		return usageError{fmt.Errorf("windows-install: give --gpu-mdev or --gpu-pci, not both")}
	case o.gpuMdev != "":
		w.Hostdevs = []domain.Hostdev{{Type: domain.HostdevMdev, UUID: o.gpuMdev}}
	case len(o.gpuPCI) > 0:
		w.Hostdevs = []domain.Hostdev{{Type: domain.HostdevPCI, Addresses: o.gpuPCI, Managed: true}}
	}
	x, err := domain.WindowsInstallXML(w)
	if err != nil {
		return usageError{fmt.Errorf("windows-install: %w", err)}
	}

	return writeWindowsRender(stdout, dir, o.name, files, iso, x, w.Disk.Path)
}

// writeWindowsRender writes what --render made into dir (the answer file
// and the medium, which hold the password, 0600) and says what is next.
func writeWindowsRender(stdout io.Writer, dir, name string, files map[string][]byte, iso []byte, x, disk string) error {
	if err := os.MkdirAll(dir, 0o711); err != nil {
		return fmt.Errorf("windows-install: %w", err)
	}
	type outFile struct {
		name string
		data []byte
		mode os.FileMode
	}
	out := []outFile{
		{windows.AnswerFile, files[windows.AnswerFile], 0o600}, // holds the password
		{windows.ScriptFile, files[windows.ScriptFile], 0o644},
		{windows.TaskRunnerFile, files[windows.TaskRunnerFile], 0o644},
	}
	runner := windows.TaskRunnerFile
	if b, ok := files[windows.MountsScriptFile]; ok { // --winfsp
		out = append(out, outFile{windows.MountsScriptFile, b, 0o644})
		runner += ", " + windows.MountsScriptFile
	}
	out = append(out, outFile{name + "-media.iso", iso, 0o600}, // holds the answer file
		outFile{name + ".xml", []byte(x + "\n"), 0o644})
	for _, f := range out {
		if err := writeFileMode(filepath.Join(dir, f.name), f.data, f.mode); err != nil {
			return fmt.Errorf("windows-install: %w", err)
		}
	}
	_, err := fmt.Fprintf(stdout, `Wrote %s: %s, %s, %s, %s-media.iso, %s.xml
Next, on the gpuvmd host (docs/windows.md):
  qemu-img create -f qcow2 %s 64G
  virsh define %s
  virsh start %s; virsh send-key %s KEY_ENTER   # answer the installer's "Press any key to boot from CD"
  # wait until 'virsh domstate %s' says shut off (sysprep shut it down), then:
  gpuvm admin image import %s --name IMAGE --os windows --firmware uefi
`, dir, windows.AnswerFile, windows.ScriptFile, runner, name, name, disk, filepath.Join(dir, name+".xml"), name, name, name, disk)
	return err
}

// readSecret reads a one-line secret file, dropping one trailing newline.
func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	b = bytes.TrimSuffix(b, []byte("\n"))
	b = bytes.TrimSuffix(b, []byte("\r"))
	return string(b), nil
}

// writeFileMode replaces path with data, with mode whatever the umask and
// an existing file's mode: it writes a temporary file (created 0600) and
// renames it, so that a secret is never readable by others on the way.
func writeFileMode(path string, data []byte, mode os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name()) // after a successful rename, there is nothing left to remove
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// startWindowsInstall asks gpuvmd to start the install of o (no --render)
// and, with --wait, follows it until the VM is shut off.
func startWindowsInstall(ctx context.Context, c *client.Client, o windowsInstallOpts, stdout, stderr io.Writer) error {
	if err := o.out.check(); err != nil {
		return err
	}
	for _, r := range []struct{ flag, v string }{{"--iso", o.iso}, {"--virtio-win", o.virtio}, {"--name", o.name}, {"--password-file", o.passwordFile}} {
		if r.v == "" {
			return usageError{fmt.Errorf("windows-install: %s is required", r.flag)}
		}
	}
	for _, r := range []struct{ flag, v string }{{"--templates", o.templates}, {"--disk", o.disk}} {
		if r.v != "" {
			return usageError{fmt.Errorf("windows-install: %s works with --render only (gpuvmd uses its built-in templates and makes the disk in its pool; see --disk-gib)", r.flag)}
		}
	}
	if o.nvidiaArgs != "" && o.nvidiaDriver == "" {
		return usageError{fmt.Errorf("windows-install: --nvidia-args needs --nvidia-driver")}
	}
	req := api.WindowsInstallRequest{
		Name: o.name, Edition: o.edition, ISO: o.iso, VirtIOWin: o.virtio, PasswordFile: o.passwordFile,
		ProductKeyFile: o.productKeyFile, CloudbaseInit: o.cloudbase, WinFsp: o.winfsp, NVIDIADriver: o.nvidiaDriver,
		NVIDIAArgs: strings.Fields(o.nvidiaArgs), LicensingScript: o.licensing,
		ImageIndex: o.imageIndex, ImageName: o.imageName, User: o.user, ComputerName: o.computer,
		Locale: o.locale, InputLocale: o.inputLocale, TimeZone: o.tz, NoSysprep: o.noSysprep,
		DiskGiB: o.diskGiB, Network: o.network, VCPUs: o.vcpus, MemoryGiB: o.memoryGiB, DomainType: o.domainType,
		InsecureBoot: o.insecureBoot, HideHypervisor: o.hide, GPUMdev: o.gpuMdev, GPUPCI: o.gpuPCI,
	}
	for _, p := range []struct{ flag, v string }{{"--iso", req.ISO}, {"--virtio-win", req.VirtIOWin}, {"--password-file", req.PasswordFile},
		{"--product-key-file", req.ProductKeyFile}, {"--cloudbase-init", req.CloudbaseInit}, {"--winfsp", req.WinFsp}, {"--nvidia-driver", req.NVIDIADriver},
		{"--licensing-script", req.LicensingScript}} {
		if p.v != "" && !filepath.IsAbs(p.v) {
			return usageError{fmt.Errorf("windows-install: %s %q must be an absolute path on the gpuvmd host (or use --render to work here)", p.flag, p.v)}
		}
	}
	if o.poll <= 0 {
		return usageError{fmt.Errorf("windows-install: --poll must be positive")}
	}
	longCalls(c) // the medium carries the installers: uploading it takes a while
	st, err := c.StartWindowsInstall(ctx, req)
	if err != nil {
		return err
	}
	if !o.out.json {
		fmt.Fprintf(stdout, "Started the install VM %s (%s); disk %s\n", st.Name, st.UUID, st.Disk)
		fmt.Fprintf(stdout, "Answer its installer's \"Press any key to boot from CD\" on the host: virsh send-key %s KEY_ENTER\n", st.Name)
	}
	if o.wait {
		if st, err = waitWindowsInstall(ctx, c, st, o.poll, stdout, !o.out.json); err != nil {
			return err
		}
	}
	if o.out.json {
		return writeJSON(stdout, st)
	}
	if st.Done {
		_, err = fmt.Fprintf(stdout, "The install VM %s has shut itself off. Store its disk as an image:\n  %s\nthen remove the install VM and its volumes (docs/windows.md): virsh undefine %s --nvram\n", st.Name, st.Next, st.Name)
		return err
	}
	_, err = fmt.Fprintf(stdout, "Follow it: gpuvm admin image windows-install ... --wait, or GET /v1/admin/images/windows-install/%s\n", st.Name)
	return err
}

// waitWindowsInstall polls the install VM every poll until it is shut off,
// printing each new state.
func waitWindowsInstall(ctx context.Context, c *client.Client, st *api.WindowsInstall, poll time.Duration, stdout io.Writer, say bool) (*api.WindowsInstall, error) {
	last := ""
	for {
		if say && st.State != last {
			fmt.Fprintf(stdout, "%s  %s %s\n", time.Now().Format(time.TimeOnly), st.Name, st.State)
			last = st.State
		}
		if st.Done {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(poll):
		}
		next, err := c.WindowsInstall(ctx, st.Name)
		if err != nil {
			return nil, fmt.Errorf("following the install VM %s: %w", st.Name, err)
		}
		st = next
	}
}
