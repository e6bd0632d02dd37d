#!/bin/sh
# gpuvm: NVIDIA vGPU software licensing of this guest (FeatureType=1).
set -eu
dir=/etc/nvidia/ClientConfigToken
mkdir -p "$dir"
umask 022
printf '%s' 'ZXlKaGJHY2lPaUpTVXpJMU5pSjkuZEdWemRDMTBiMnRsYmcuYzJsbg==' | base64 -d > "$dir/client_configuration_token_gpuvm.tok.new"
chmod 0744 "$dir/client_configuration_token_gpuvm.tok.new"
mv -f "$dir/client_configuration_token_gpuvm.tok.new" "$dir/client_configuration_token_gpuvm.tok"
conf=/etc/nvidia/gridd.conf
if [ ! -e "$conf" ] && [ -e /etc/nvidia/gridd.conf.template ]; then
  cp /etc/nvidia/gridd.conf.template "$conf"
fi
touch "$conf"
if grep -q '^[[:space:]]*FeatureType[[:space:]]*=' "$conf"; then
  sed -i 's/^[[:space:]]*FeatureType[[:space:]]*=.*/FeatureType=1/' "$conf"
else
  printf 'FeatureType=1\n' >> "$conf"
fi
if command -v systemctl >/dev/null 2>&1 && systemctl cat nvidia-gridd.service >/dev/null 2>&1; then
  systemctl restart nvidia-gridd.service
else
  echo "gpuvm: nvidia-gridd is not installed yet; it takes the token and FeatureType when it starts" >&2
fi
