// Command gpuvm-backend-vgpu is gpuvm's time-sliced vGPU backend: it makes
// NVIDIA vGPUs through the legacy mdev interface or the vendor-specific VFIO
// framework, whichever each GPU offers. gpuvmd starts it through go-plugin.
package main

import (
	"fmt"
	"os"

	"github.com/gpuvm/gpuvm/pkg/backend"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println(backend.BinaryPrefix+backend.NameVGPU, Version)
		return
	}
	backend.Serve(New())
}
