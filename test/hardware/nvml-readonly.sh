#!/usr/bin/env bash
# Read-only check of gpuvm's host layer against a real NVIDIA GPU.
#
# It builds the backend binaries and the CLI, then prints what they see:
# `nvidia-smi` for reference, and `gpuvm host inventory` in text and JSON.
# It NEVER changes MIG mode, creates GPU or compute instances, creates vGPUs,
# binds drivers or resets the GPU: it only runs the Inventory and Health
# calls, which read sysfs and NVML.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:-$(mktemp -d)}"
export CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations"
export PATH="/usr/local/go/bin:$PATH"

bin="$(mktemp -d)"
trap 'rm -rf "$bin"' EXIT
for p in vgpu mig passthrough; do
	go build -o "$bin/plugins/gpuvm-backend-$p" "./plugins/$p"
done
CGO_ENABLED=0 go build -o "$bin/gpuvm" ./cmd/gpuvm

{
	echo "== nvidia-smi"
	nvidia-smi || echo "(nvidia-smi failed: $?)"
	echo "== nvidia-smi -q (MIG and vGPU sections)"
	nvidia-smi -q | grep -iE -A3 'MIG Mode|vGPU|Virtualization' || true
	echo "== nvidia-smi mig -lgip (profiles, read-only)"
	nvidia-smi mig -lgip 2>&1 || true
	echo "== nvidia-smi mig -lgipp (placements, read-only)"
	nvidia-smi mig -lgipp 2>&1 || true
} >"$out/nvidia-smi.txt" 2>&1
cat "$out/nvidia-smi.txt"

state="$(mktemp -d)"
echo "== gpuvm host inventory"
"$bin/gpuvm" host inventory --plugin-dir "$bin/plugins" --state-dir "$state" --verbose | tee "$out/inventory.txt"
"$bin/gpuvm" host inventory --plugin-dir "$bin/plugins" --state-dir "$state" --json >"$out/inventory.json"
echo "inventory JSON: $out/inventory.json"
