package api

// WindowsInstallRequest is the body of POST /v1/admin/images/windows-install:
// an unattended Windows install (docs/windows.md) that gpuvmd defines and
// starts. Every path is on the gpuvmd host.
type WindowsInstallRequest struct {
	// Name names the install VM (its libvirt domain) and its volumes
	// NAME.qcow2 (the system disk) and NAME-media.iso (the answer file's
	// medium).
	Name string `json:"name"`
	// Edition is windows10, windows11 (default) or server2022.
	Edition string `json:"edition,omitempty"`
	// ISO is the Windows installer ISO, VirtIOWin the virtio-win ISO.
	ISO       string `json:"iso"`
	VirtIOWin string `json:"virtio_win"`
	// PasswordFile holds the local admin's password (one trailing newline
	// is dropped); ProductKeyFile, optional, the product key.
	PasswordFile   string `json:"password_file"`
	ProductKeyFile string `json:"product_key_file,omitempty"`
	// CloudbaseInit is the cloudbase-init MSI, WinFsp WinFsp's MSI (homes
	// in the image's VMs: docs/windows.md), NVIDIADriver the NVIDIA guest
	// driver installer (.exe) with NVIDIAArgs, LicensingScript a
	// gpuvm-licensing.ps1 to run at first logon: put on the medium.
	CloudbaseInit   string   `json:"cloudbase_init,omitempty"`
	WinFsp          string   `json:"winfsp,omitempty"`
	NVIDIADriver    string   `json:"nvidia_driver,omitempty"`
	NVIDIAArgs      []string `json:"nvidia_args,omitempty"`
	LicensingScript string   `json:"licensing_script,omitempty"`
	// ImageIndex or ImageName picks the image in the ISO's install.wim.
	ImageIndex int    `json:"image_index,omitempty"`
	ImageName  string `json:"image_name,omitempty"`
	// The answer file's options (defaults in pkg/windows).
	User         string `json:"user,omitempty"`
	ComputerName string `json:"computer_name,omitempty"`
	Locale       string `json:"locale,omitempty"`
	InputLocale  string `json:"input_locale,omitempty"`
	TimeZone     string `json:"timezone,omitempty"`
	NoSysprep    bool   `json:"no_sysprep,omitempty"`
	// The install VM: disk size (default 64 GiB), libvirt network (default
	// "default"), CPUs (default 4), memory (default 8 GiB), domain type kvm
	// or qemu (default: what gpuvmd's accelerator check chose; kvm is
	// refused where KVM is unusable), Secure Boot off, the hypervisor
	// hidden, and a GPU (an existing vGPU's mdev UUID, or PCI functions to
	// pass through).
	DiskGiB        uint     `json:"disk_gib,omitempty"`
	Network        string   `json:"network,omitempty"`
	VCPUs          uint     `json:"vcpus,omitempty"`
	MemoryGiB      uint     `json:"memory_gib,omitempty"`
	DomainType     string   `json:"domain_type,omitempty"`
	InsecureBoot   bool     `json:"insecure_boot,omitempty"`
	HideHypervisor bool     `json:"hide_hypervisor,omitempty"`
	GPUMdev        string   `json:"gpu_mdev,omitempty"`
	GPUPCI         []string `json:"gpu_pci,omitempty"`
}

// WindowsInstall is an unattended Windows install's VM: running while
// Setup and the first logon run, shutoff (Done) once sysprep has shut it
// down; then Next is the command that stores its disk as an image.
type WindowsInstall struct {
	Name string `json:"name"`
	UUID string `json:"uuid"`
	// State is the domain's (running, shutoff, ...), Reason libvirt's why.
	State  string `json:"state"`
	Reason string `json:"reason,omitempty"`
	Done   bool   `json:"done"`
	// Disk is the system disk's path, Media the answer file medium's.
	Disk  string `json:"disk"`
	Media string `json:"media,omitempty"`
	Next  string `json:"next,omitempty"`
}
