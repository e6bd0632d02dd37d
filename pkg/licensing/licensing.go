// Package licensing makes what a guest needs to license its NVIDIA vGPU
// software: the client configuration token of the admin's NVIDIA License
// System instance (CLS or DLS) in the driver's token directory, and the
// licensed product it asks for (FeatureType). gpuvm delivers it in the
// guest's cloud-init seed as a vendor-data script (Linux) or a PowerShell
// script for cloudbase-init or the unattended install's first logon
// (Windows).
//
// Facts, from NVIDIA's Virtual GPU Client Licensing User Guide (releases
// 13 to 17, "Configuring a Licensed Client"):
//   - Linux: the token goes in /etc/nvidia/ClientConfigToken/; its mode
//     lets the owner read, write and execute it and the group and others
//     only read it (0744). FeatureType goes in /etc/nvidia/gridd.conf
//     (made from gridd.conf.template when absent); the nvidia-gridd service
//     is restarted to take both.
//   - Windows: the token goes in C:\Program Files\NVIDIA Corporation\vGPU
//     Licensing\ClientConfigToken\; FeatureType is the REG_DWORD value of
//     HKLM\SOFTWARE\NVIDIA Corporation\Global\GridLicensing; the NVIDIA
//     Display Container LS service (NVDisplay.ContainerLocalSystem) is
//     restarted.
//   - FeatureType (also NVML's nvmlGridLicenseFeatureCode_t): 0 unlicensed,
//     1 NVIDIA vGPU — the licensed product follows the vGPU type (Q: RTX
//     vWS, B: vPC, A: vApps, C: vCS), so it is right for every vGPU,
//     MIG-backed ones included — 2 NVIDIA RTX Virtual Workstation and 4
//     Virtual Compute Server, the two a passed-through GPU may use.
//
// The token is a secret: this package never logs it, and an error about
// it never quotes it.
package licensing

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gpuvm/gpuvm/pkg/config"
	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// FeatureType codes (gridd.conf FeatureType, the Windows registry value).
const (
	Unlicensed  = 0
	VGPU        = 1
	Workstation = 2
	Compute     = 4
)

// maxToken bounds a token file: NVIDIA's are a few kilobytes.
const maxToken = 64 << 10

// Guest is what one guest is given.
type Guest struct {
	Token       []byte
	FeatureType int
}

// FeatureType is the product a VM asks for: the configured one, or, with
// config.FeatureAuto, VGPU for a vGPU or MIG slice (a MIG slice reaches a
// VM as a MIG-backed vGPU, REFERENCE.md), Workstation for a whole GPU
// whose profile has a remote desktop in the guest, Compute for one
// without.
func FeatureType(l *config.Licensing, kind gpu.Kind, desktopInGuest bool) int {
	switch l.FeatureType {
	case config.FeatureVGPU:
		return VGPU
	case config.FeatureWorkstation:
		return Workstation
	case config.FeatureCompute:
		return Compute
	case config.FeatureUnlicensed:
		return Unlicensed
	}
	switch {
	case kind == gpu.KindVGPU || kind == gpu.KindMIG:
		return VGPU
	case desktopInGuest:
		return Workstation
	default:
		return Compute
	}
}

// ReadToken reads a client configuration token file: it must exist, be
// at most 64 KiB and be text (NVIDIA's tokens are base64url JWTs), so that
// a wrong path (a directory, a binary, an empty file) is said at once.
func ReadToken(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("licensing: client configuration token: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxToken+1))
	if err != nil {
		return nil, fmt.Errorf("licensing: reading the client configuration token %s: %w", path, err)
	}
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0:
		return nil, fmt.Errorf("licensing: the client configuration token %s is empty", path)
	case len(b) > maxToken:
		return nil, fmt.Errorf("licensing: the client configuration token %s is larger than %d bytes: not a token", path, maxToken)
	case bytes.ContainsFunc(b, func(r rune) bool { return r < 0x20 || r > 0x7e }):
		return nil, fmt.Errorf("licensing: %s is not a client configuration token (a token is one line of text)", path)
	}
	return b, nil
}

// tokenName is the token's file name in the guest: the driver reads the
// newest .tok in the directory.
const tokenName = "client_configuration_token_gpuvm.tok"

// LinuxScript is the vendor-data script of a Linux guest: cloud-init runs
// it once per instance (its scripts-vendor module), beside whatever the
// profile's user-data does. The token travels base64-encoded, so no byte
// of it can end the script's quoting.
func LinuxScript(g Guest) ([]byte, error) {
	if err := g.check(); err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, `#!/bin/sh
# gpuvm: NVIDIA vGPU software licensing of this guest (FeatureType=%d).
set -eu
dir=/etc/nvidia/ClientConfigToken
mkdir -p "$dir"
umask 022
printf '%%s' '%s' | base64 -d > "$dir/%s.new"
chmod 0744 "$dir/%s.new"
mv -f "$dir/%s.new" "$dir/%s"
conf=/etc/nvidia/gridd.conf
if [ ! -e "$conf" ] && [ -e /etc/nvidia/gridd.conf.template ]; then
  cp /etc/nvidia/gridd.conf.template "$conf"
fi
touch "$conf"
if grep -q '^[[:space:]]*FeatureType[[:space:]]*=' "$conf"; then
  sed -i 's/^[[:space:]]*FeatureType[[:space:]]*=.*/FeatureType=%d/' "$conf"
else
  printf 'FeatureType=%d\n' >> "$conf"
fi
if command -v systemctl >/dev/null 2>&1 && systemctl cat nvidia-gridd.service >/dev/null 2>&1; then
  systemctl restart nvidia-gridd.service
else
  echo "gpuvm: nvidia-gridd is not installed yet; it takes the token and FeatureType when it starts" >&2
fi
`, g.FeatureType, base64.StdEncoding.EncodeToString(g.Token), tokenName, tokenName, tokenName, tokenName, g.FeatureType, g.FeatureType)
	return []byte(b.String()), nil
}

// WindowsScript is the PowerShell script of a Windows guest, for
// cloudbase-init's user-data plugins (its first line, #ps1_sysnative,
// tells cloudbase-init to run it in 64-bit PowerShell) or the unattended
// install's first-logon commands.
func WindowsScript(g Guest) ([]byte, error) {
	if err := g.check(); err != nil {
		return nil, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, `#ps1_sysnative
# gpuvm: NVIDIA vGPU software licensing of this guest (FeatureType=%d).
$ErrorActionPreference = 'Stop'
$dir = 'C:\Program Files\NVIDIA Corporation\vGPU Licensing\ClientConfigToken'
New-Item -ItemType Directory -Force -Path $dir | Out-Null
[IO.File]::WriteAllBytes((Join-Path $dir '%s'), [Convert]::FromBase64String('%s'))
$key = 'HKLM:\SOFTWARE\NVIDIA Corporation\Global\GridLicensing'
New-Item -Path $key -Force | Out-Null
New-ItemProperty -Path $key -Name 'FeatureType' -PropertyType DWord -Value %d -Force | Out-Null
$svc = Get-Service -Name 'NVDisplay.ContainerLocalSystem' -ErrorAction SilentlyContinue
if ($svc) { Restart-Service -InputObject $svc -Force }
else { Write-Output 'gpuvm: the NVIDIA display driver is not installed yet; it takes the token and FeatureType when it starts' }
`, g.FeatureType, tokenName, base64.StdEncoding.EncodeToString(g.Token), g.FeatureType)
	return []byte(b.String()), nil
}

func (g Guest) check() error {
	switch g.FeatureType {
	case Unlicensed, VGPU, Workstation, Compute:
	default:
		return fmt.Errorf("licensing: FeatureType %d is none of 0, 1, 2, 4", g.FeatureType)
	}
	if len(g.Token) == 0 {
		return fmt.Errorf("licensing: no client configuration token")
	}
	return nil
}
