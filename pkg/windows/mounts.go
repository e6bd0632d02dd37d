package windows

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"regexp"
)

// A person's home in a Windows guest (docs/windows.md, "Homes"): the
// guest's virtiofs driver and service come with the virtio-win guest
// tools, and its file systems with WinFsp, which the first logon installs
// from the medium when the image is built with it (Config.WinFspMSI). The
// first logon then leaves virtio-win's own service (VirtioFsSvc, which
// mounts one file system) off, registers virtiofs.exe with WinFsp's
// launcher (fsreg.bat virtiofs … "-t %1 -m %2"), and installs
// MountsScriptFile, which a scheduled task runs as SYSTEM at every start:
// it finds MountsFile on a drive's root (the VM's seed CD-ROM, which
// gpuvm writes) and has the launcher mount each tag on its drive letter.
// An image built without WinFsp ignores the file; its VMs get the device
// and nothing mounts it.
const (
	// MountsScriptFile is the script the image keeps in
	// C:\ProgramData\gpuvm (templates/windows/gpuvm-mounts.ps1.tmpl).
	MountsScriptFile = "gpuvm-mounts.ps1"
	// MountsFile is the seed's list of what to mount ([]Mount).
	MountsFile = "gpuvm-mounts.json"
	// HomeDrive is where a person's home appears.
	HomeDrive = "H:"
)

// Mount is one virtiofs file system a Windows guest mounts: its tag (the
// domain's <target dir>), the drive letter, and a name for people.
type Mount struct {
	Tag   string `json:"tag"`
	Drive string `json:"drive"`
	Name  string `json:"name"`
}

var (
	mountTagRE   = regexp.MustCompile(`^[A-Za-z0-9._-]{1,36}$`)
	mountDriveRE = regexp.MustCompile(`^[D-Z]:$`)
	mountNameRE  = regexp.MustCompile(`^[^\x00-\x1f\x7f]{1,64}$`)
)

// MountsJSON is MountsFile for ms, each checked: the script passes the tag
// and drive to the launcher on its command line.
func MountsJSON(ms []Mount) ([]byte, error) {
	drives := map[string]bool{}
	for i, m := range ms {
		switch {
		case !mountTagRE.MatchString(m.Tag):
			return nil, fmt.Errorf("windows mount %d: tag %q: want 1 to 36 letters, digits, '.', '_' or '-'", i+1, m.Tag)
		case !mountDriveRE.MatchString(m.Drive):
			return nil, fmt.Errorf("windows mount %d: drive %q: want a letter from D to Z and a colon, such as %s", i+1, m.Drive, HomeDrive)
		case drives[m.Drive]:
			return nil, fmt.Errorf("windows mount %d: drive %s is taken by another mount", i+1, m.Drive)
		case !mountNameRE.MatchString(m.Name):
			return nil, fmt.Errorf("windows mount %d: name %q: want 1 to 64 printable characters", i+1, m.Name)
		}
		drives[m.Drive] = true
	}
	if ms == nil {
		ms = []Mount{}
	}
	return json.MarshalIndent(ms, "", "  ")
}

type mountsData struct {
	MountsFile, Launcher, ServiceClass string
}

// MountsScript renders MountsScriptFile from "gpuvm-mounts.ps1.tmpl" in
// tmpls (DefaultTemplates() when nil, or when tmpls lacks it). It holds
// nothing of any VM: the first logon bakes it into the image.
func MountsScript(tmpls fs.FS) ([]byte, error) {
	return renderTemplate(tmpls, MountsScriptFile, mountsData{MountsFile: MountsFile,
		Launcher: `C:\Program Files (x86)\WinFsp\bin\launchctl-x64.exe`, ServiceClass: "virtiofs"})
}
