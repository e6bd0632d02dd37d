// Command gpuvm-backend-passthrough is gpuvm's whole-GPU passthrough backend:
// it moves an NVIDIA GPU, and every other function of its IOMMU group, to
// vfio-pci so that one VM gets the whole card. gpuvmd starts it through
// go-plugin.
package main

import (
	"fmt"
	"os"

	"github.com/gpuvm/gpuvm/pkg/backend"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println(backend.BinaryPrefix+backend.NamePassthrough, Version)
		return
	}
	backend.Serve(New())
}
