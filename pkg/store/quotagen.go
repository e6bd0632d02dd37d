package store

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
func (s *Store) touchQuota() {
	if s.quotaTouched != nil {
		*s.quotaTouched = true
		return
	}
	s.quotaGen.Add(1)
}

// HostsGeneration counts the changes of the hosts (registrations,
// heartbeats, hosts marked down or drained) and of the GPU drains made
// through this Store, once each has been written. A caller that keeps what
// it read of the hosts reads the generation first, and reads them again
// when it has moved; it also bounds how long it keeps them, for other
// processes' writes (a fleet's other nodes), which do not move it.
func (s *Store) HostsGeneration() uint64 { return s.hostsGen.Load() }
