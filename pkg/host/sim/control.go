package sim

import "fmt"

// SetInUse marks a device (mdev UUID, VF or GPU address) as held open by a
// running VM, or releases it. Removing a device in use fails with EBUSY, as
// on a real host. Tests use it to prove that a refused removal leaves the
// host unchanged.
func (h *Host) SetInUse(id string, inUse bool) error {
	return h.st.update(func(s *state, _ *tree) error {
		if s.InUse == nil {
			s.InUse = map[string]bool{}
		}
		if inUse {
			s.InUse[id] = true
		} else {
			delete(s.InUse, id)
		}
		return nil
	})
}

// SetUtilization sets the synthetic utilisation (0-100 %) that NVML reports
// for a GPU.
func (h *Host) SetUtilization(addr string, percent int) error {
	if percent < 0 || percent > 100 {
		return fmt.Errorf("utilization %d%% is not within 0-100", percent)
	}
	return h.st.update(func(s *state, _ *tree) error {
		if s.gpu(addr) == nil {
			return fmt.Errorf("simulated host %s has no GPU %s", s.Preset, addr)
		}
		if s.Utilization == nil {
			s.Utilization = map[string]int{}
		}
		s.Utilization[addr] = percent
		return nil
	})
}

// Snapshot returns the host's whole state in a canonical encoding: two
// snapshots are equal exactly when the hosts are.
func (h *Host) Snapshot() ([]byte, error) {
	s, _, err := h.st.read()
	if err != nil {
		return nil, err
	}
	c, err := clone(s)
	if err != nil {
		return nil, err
	}
	return encode(c)
}
