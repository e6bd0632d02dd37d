package store

import "sync/atomic"

// QuotaGeneration counts the committed changes, made through this Store, of
// what the sharing policy's quotas count: allocations claimed or released
// (and so the usage that ended), a VM's state or lease end, VMs adopted,
// a user's groups. A caller that keeps what it read of those (an
// admission's view of who holds what) reads the generation before it reads
// them, and reads them again when the generation has moved. Writes by
// other processes (a fleet's other nodes, an admin's SQL) do not move it:
// such a caller also bounds how long it keeps what it read.
func (s *Store) QuotaGeneration() uint64 { return s.quotaGen.Load() }

// touchQuota notes a change of what the quotas count: at the commit of the
// transaction s is bound to, or now outside one.
func (s *Store) touchQuota() { touch(s.quotaGen, s.quotaTouched) }

// touch moves a generation: at the commit of the transaction whose flag
// pending is (Tx), or now outside one.
func touch(gen *atomic.Uint64, pending *bool) {
	if pending != nil {
		*pending = true
		return
	}
	gen.Add(1)
}
