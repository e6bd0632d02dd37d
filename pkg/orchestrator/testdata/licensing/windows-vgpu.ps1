#ps1_sysnative
# gpuvm: NVIDIA vGPU software licensing of this guest (FeatureType=1).
$ErrorActionPreference = 'Stop'
$dir = 'C:\Program Files\NVIDIA Corporation\vGPU Licensing\ClientConfigToken'
New-Item -ItemType Directory -Force -Path $dir | Out-Null
[IO.File]::WriteAllBytes((Join-Path $dir 'client_configuration_token_gpuvm.tok'), [Convert]::FromBase64String('ZXlKaGJHY2lPaUpTVXpJMU5pSjkuZEdWemRDMTBiMnRsYmcuYzJsbg=='))
$key = 'HKLM:\SOFTWARE\NVIDIA Corporation\Global\GridLicensing'
New-Item -Path $key -Force | Out-Null
New-ItemProperty -Path $key -Name 'FeatureType' -PropertyType DWord -Value 1 -Force | Out-Null
$svc = Get-Service -Name 'NVDisplay.ContainerLocalSystem' -ErrorAction SilentlyContinue
if ($svc) { Restart-Service -InputObject $svc -Force }
else { Write-Output 'gpuvm: the NVIDIA display driver is not installed yet; it takes the token and FeatureType when it starts' }
