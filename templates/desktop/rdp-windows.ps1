#ps1_sysnative
# gpuvm: Remote Desktop on a Windows guest, for
# profile.desktop { protocol = "rdp" }. Windows reads the seed with
# cloudbase-init (its NoCloud service,
# cloudbaseinit.metadata.services.nocloudservice.NoCloudConfigDriveService,
# in metadata_services), which runs this user-data as PowerShell
# (#ps1_sysnative) once per instance.
#
# Variables (declare them in the template block, see docs/config.md,
# "Desktops in the guest"): rdp_port (3389). The user must exist (the
# image's, or cloudbase-init's CreateUserPlugin); it joins Remote Desktop
# Users.
$ErrorActionPreference = 'Stop'
$ts = 'HKLM:\System\CurrentControlSet\Control\Terminal Server'
Set-ItemProperty -Path $ts -Name 'fDenyTSConnections' -Value 0
# Network Level Authentication: the password is checked before a session.
Set-ItemProperty -Path "$ts\WinStations\RDP-Tcp" -Name 'UserAuthentication' -Value 1
%{ if rdp_port != 3389 ~}
Set-ItemProperty -Path "$ts\WinStations\RDP-Tcp" -Name 'PortNumber' -Value ${rdp_port}
New-NetFirewallRule -DisplayName 'gpuvm Remote Desktop' -Direction Inbound -Protocol TCP -LocalPort ${rdp_port} -Action Allow | Out-Null
%{ endif ~}
# The Remote Desktop firewall rules, by their group's resource name (the
# display name is translated).
Enable-NetFirewallRule -Group '@FirewallAPI.dll,-28752'
# Remote Desktop Users, by its well-known SID (the name is translated).
if (Get-LocalUser -Name '${user}' -ErrorAction SilentlyContinue) {
    Add-LocalGroupMember -SID 'S-1-5-32-555' -Member '${user}' -ErrorAction SilentlyContinue
} else {
    Write-Output "gpuvm: no local user ${user}: add the desktop's user to Remote Desktop Users yourself"
}
Restart-Service -Name TermService -Force
