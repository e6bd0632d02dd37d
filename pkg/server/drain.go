package server

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/store"
)

// pciAddress is a PCI address, its domain optional: "0000:41:00.0" or
// "41:00.0".
var pciAddress = regexp.MustCompile(`^(?:([0-9a-f]{4}):)?([0-9a-f]{2}):([0-1][0-9a-f])\.([0-7])$`)

// maxDrainReason bounds the reason of a drain.
const maxDrainReason = 200

// normalizePCIAddress writes a PCI address in its full, lower-case form;
// ok is false when s is not one.
func normalizePCIAddress(s string) (addr string, ok bool) {
	m := pciAddress.FindStringSubmatch(strings.ToLower(s))
	if m == nil {
		return "", false
	}
	dom := m[1]
	if dom == "" {
		dom = "0000"
	}
	return fmt.Sprintf("%s:%s:%s.%s", dom, m[2], m[3], m[4]), true
}

// gpuAddress reads the GPU address of the path in its full form, answering
// 404 when it is not a PCI address.
func (s *Server) gpuAddress(c *gin.Context) (string, bool) {
	addr, ok := normalizePCIAddress(c.Param("addr"))
	if !ok {
		s.writeProblem(c, with(errNotFound, fmt.Sprintf("%s is not a GPU's PCI address (like 0000:41:00.0)", strconv.Quote(c.Param("addr")))))
	}
	return addr, ok
}

func toAPIDrain(d *store.GPUDrain) *api.Drain {
	return &api.Drain{Reason: d.Reason, By: d.DrainedBy, Since: d.CreatedAt}
}

// markDrained sets Drained on the GPUs of this host that are drained; it
// answers and reports false when the drains cannot be read.
func (s *Server) markDrained(c *gin.Context, hi *api.HostInventory) bool {
	drains, err := s.Store.ListGPUDrains(c.Request.Context(), s.Host)
	if err != nil {
		s.writeProblem(c, err)
		return false
	}
	for i := range drains {
		for j := range hi.GPUs {
			if hi.GPUs[j].Address == drains[i].GPUAddress {
				hi.GPUs[j].Drained = toAPIDrain(&drains[i])
			}
		}
	}
	return true
}

// gpuOnHost checks that this host has the GPU; it answers 404 (or 503 when
// a backend could not say) and reports false when not.
func (s *Server) gpuOnHost(c *gin.Context, addr string) bool {
	hi, failed := CollectInventory(c.Request.Context(), s.Backends, s.log)
	var known []string
	for _, g := range hi.GPUs {
		if g.Address == addr {
			return true
		}
		known = append(known, g.Address)
	}
	if failed > 0 {
		s.writeProblem(c, with(errUnavailable, fmt.Sprintf("GPU %s is not in the inventory of %s, but some backends did not answer: %s",
			addr, s.Host, strings.Join(hi.Notes, "; "))))
		return false
	}
	list := "it has no GPU"
	if len(known) > 0 {
		list = "its GPUs are " + strings.Join(known, ", ")
	}
	s.writeProblem(c, with(errNotFound, fmt.Sprintf("host %s has no GPU %s: %s", s.Host, addr, list)))
	return false
}

func (s *Server) drainGPU(c *gin.Context) {
	addr, ok := s.gpuAddress(c)
	if !ok {
		return
	}
	var req api.DrainRequest
	if !s.decodeOptionalJSON(c, &req) {
		return
	}
	req.Reason = strings.TrimSpace(req.Reason)
	if strings.ContainsAny(req.Reason, "\r\n") || utf8.RuneCountInString(req.Reason) > maxDrainReason {
		s.writeProblem(c, withField(errValidation, "reason", fmt.Sprintf("the reason is one line of at most %d characters", maxDrainReason)))
		return
	}
	if !s.gpuOnHost(c, addr) {
		return
	}
	ctx := c.Request.Context()
	by := user(c).Name
	if err := s.Store.DrainGPU(ctx, &store.GPUDrain{Host: s.Host, GPUAddress: addr, Reason: req.Reason, DrainedBy: by}); err != nil {
		s.writeProblem(c, err)
		return
	}
	// Read it back: draining again keeps the first time.
	drains, err := s.Store.ListGPUDrains(ctx, s.Host)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	out := api.GPUDrainState{Host: s.Host, Address: addr}
	for i := range drains {
		if drains[i].GPUAddress == addr {
			out.Drained = toAPIDrain(&drains[i])
		}
	}
	if out.Drained == nil {
		s.writeProblem(c, fmt.Errorf("drain gpu %s: the drain was written but is not there", addr))
		return
	}
	s.log.Info("GPU drained", "gpu", addr, "host", s.Host, "reason", req.Reason, "by", by)
	s.drainEvent(ctx, s.Host, addr, true, by)
	if s.Worker != nil {
		s.Worker.Wake() // queued VMs get their reasons updated
	}
	c.JSON(http.StatusOK, out)
}

func (s *Server) undrainGPU(c *gin.Context) {
	addr, ok := s.gpuAddress(c)
	if !ok {
		return
	}
	was, err := s.Store.UndrainGPU(c.Request.Context(), s.Host, addr)
	if err != nil {
		s.writeProblem(c, err)
		return
	}
	if !was {
		// Say which: an unknown GPU, or one that is not drained.
		if s.gpuOnHost(c, addr) {
			s.writeProblem(c, with(errNotFound, fmt.Sprintf("GPU %s of host %s is not drained", addr, s.Host)))
		}
		return
	}
	s.log.Info("GPU undrained", "gpu", addr, "host", s.Host, "by", user(c).Name)
	s.drainEvent(c.Request.Context(), s.Host, addr, false, user(c).Name)
	if s.Worker != nil {
		s.Worker.Wake() // queued VMs may fit now
	}
	c.JSON(http.StatusOK, api.GPUDrainState{Host: s.Host, Address: addr})
}
