package server

import (
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// licenseWindow is how old the newest sample of a vGPU's licence state may
// be to be shown: older, it is not known now.
const licenseWindow = 10 * time.Minute

// addLicenses fills the licence state of a running VM's vGPUs from the
// samples (any server's sampler writes them): what the portal and gpuvm
// show say of a guest left unlicensed. A store that cannot say leaves
// them out, logged.
func (s *Server) addLicenses(c *gin.Context, vm *store.VM, out *api.VM) {
	if vm.State != store.VMRunning || len(out.GPUs) == 0 {
		return
	}
	lic, err := s.Store.VGPULicenses(c.Request.Context(), vm.ID, time.Now().Add(-licenseWindow))
	if err != nil {
		s.log.Warn("GET vm: the vGPUs' licence state is left out", "vm", vm.ID, "err", err)
		return
	}
	for i := range out.GPUs {
		if g := &out.GPUs[i]; g.Device != "" {
			g.License = lic[g.Device]
		}
	}
}
