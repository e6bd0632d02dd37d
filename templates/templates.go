// Package templates holds the text templates gpuvm renders and an admin may
// override: cloud-init/ is the NoCloud seed of every VM (user-data,
// meta-data, network-config). An override directory holds files of the same
// names; pkg/hypervisor/cloudinit documents the data they receive.
//
// desktop/ holds cloud-init user-data templates (HCL string templates, for
// a configuration's template blocks: file = ".../desktop/rdp-debian.yaml")
// that set up the guest side of a profile's desktop: rdp-debian.yaml (xrdp
// on Debian/Ubuntu), rdp-windows.ps1 (Remote Desktop, through
// cloudbase-init), sunshine.yaml (Sunshine from the admin's .deb URL).
// docs/config.md, "Desktops in the guest", says how to use them.
//
// windows/ is the unattended install of a Windows guest (autounattend.xml
// and the first-logon script); pkg/windows documents the data they receive.
package templates

import "embed"

// FS is the built-in templates.
//
//go:embed cloud-init/*.tmpl windows/*.tmpl
var FS embed.FS
