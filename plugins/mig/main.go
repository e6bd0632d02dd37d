// Command gpuvm-backend-mig is gpuvm's MIG backend: it creates a MIG GPU
// instance (and its compute instance) through NVML at the placement gpuvmd
// chose, then the MIG-backed vGPU on it. gpuvmd starts it through go-plugin.
package main

import (
	"fmt"
	"os"

	"github.com/gpuvm/gpuvm/pkg/backend"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "--version" {
		fmt.Println(backend.BinaryPrefix+backend.NameMIG, Version)
		return
	}
	backend.Serve(New())
}
