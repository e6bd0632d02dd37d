// Package scheduler decides where a VM's GPU devices go: which host, which
// GPU, and on a MIG GPU which start slot. It keeps an in-memory model of the
// GPUs (hosts → GPUs → mode → slots), places needs on it, and runs the
// scheduling cycle that starts, backfills and preempts requests under a
// Policy (pkg/policy implements the rules gpuvm ships).
//
// It is pure: no I/O, no clock, no cgo, no randomness. The same inputs give the
// same decisions, and every request that waits gets a reason and a place in
// the queue.
//
// # The model
//
//   - A GPU is in one mode at a time (REFERENCE.md §2, §3; DESIGN.md): MIG,
//     time-sliced vGPU or passthrough, and changes mode only when empty. A GPU
//     whose configured mode is "auto" may take any kind while it is empty.
//   - MIG: an 8-slot memory axis (4 on the A30) with the real placement tables
//     of pkg/gpu: an instance of a profile takes Size contiguous slices from
//     one of the profile's allowed start slots, within the compute budget and
//     the per-profile maximum. Every state reachable from an empty GPU is
//     enumerated once per table (mig.go), so a decision reads a table. A
//     pinned mig_layout restricts a GPU to its carved instances.
//   - Time-sliced vGPU: one type per GPU (equal-size mode) up to the type's
//     maximum instances, or, in mixed-size mode, Q/B/A types of any size up to
//     the framebuffer and the board's vGPU limit.
//   - Passthrough: the whole GPU, with every other GPU of its IOMMU group.
//
// NewInventory builds the model from plain HostSpec/GPUSpec values and the
// live Allocations (FromHost converts a host's merged inventory); Allocate and
// Release keep it up to date; Clone copies it for planning.
//
// # Placement
//
// Place chooses, without changing anything; in Pack mode (the default):
//
//  1. MIG: the start slot that destroys the fewest placements of larger
//     profiles (damage: a weighted count of the free start slots every
//     profile loses, each size class outweighing all smaller ones), so three
//     1g.10gb on an empty H100 go to slots 6, 4, 5 and a 4g.40gb still fits
//     at 0, where NVML's first fit (0, 1, 2) would have lost it; an empty GPU
//     is only broken when no used one fits. vGPU: a GPU already holding the
//     type (or a mixed-size GPU with room), then an empty GPU already in vGPU
//     mode, then an empty GPU that must switch (auto), keeping MIG-capable
//     GPUs for MIG. Whole GPUs: ones already bound for passthrough, then the
//     least capable (no MIG, no vGPU), then the smallest board.
//  2. Then the GPU whose busy horizon (when everything on it ends) the lease
//     extends least, so that GPUs empty together and whole-GPU requests
//     find room; then the fullest GPU and host.
//
// Spread does the opposite (least loaded host and GPU first); FirstFit
// reproduces NVML's own order for comparison. An abstract need
// ("memory = 20GiB" over allowed kinds) takes the cheapest device that fits:
// the smallest share of a GPU, then the smallest memory.
//
// From 128 GPUs on, Place does not look at every GPU (index.go): plain
// GPUs (not draining, usable, no MIG layout, no IOMMU-group companion) are
// kept in buckets of one placement state, kept up to date by Allocate and
// Release. A placement evaluates one GPU per bucket, which says whether all
// of them fit and bounds their scores, searches the fitting buckets best
// bound first and stops at one that cannot beat the best GPU found; GPUs
// that are not plain and GPUs a hold touches are looked at one by one. The
// result is that of a look at every GPU, Reason included
// (TestPlaceMatchesReference keeps that look as the reference). A need of
// several whole GPUs tries hosts by a bound in the same way. Several MIG
// instances or vGPUs on one host (index_hosts.go): what a GPU offers its
// next device depends on its own state alone, so one GPU per bucket, run
// device after device, tells what each GPU of the bucket offers (its
// chain); hosts are met through the buckets by a bound from their chains,
// merged best bound first, and the search stops at one that cannot beat
// the best host found. CountFits counts what fits without placing, GPU by
// GPU, one GPU per bucket (fits.go).
//
// # The cycle
//
// Cycle orders the queue by the Policy, then, before starting anything,
// holds capacity for requests that cannot start: the largest of the first
// Options.Lookahead blocked requests gets the devices it would start on
// soonest (Options.Reserve of them), planned on the GPUs as they are.
// Requests then start in queue order wherever they do not touch held
// capacity before the hold's holder starts (EASY backfill: a request may
// start ahead only if it does not delay the reservation), except a request
// ahead of the holder in the queue and at least as large: a hold never lets
// a request overtake one as large that asked first. Bookings of the
// Policy are holds too. Small requests find room in the gaps that open all
// the time; large ones must wait for a whole GPU to drain, and without holds
// they starve (greedy "start whatever fits" accepts a third of the 7g.80gb
// requests of the saturated example trace, test/traces; the default cycle
// twice as many, with more GPU-hours served).
//
// A non-preemptible request that still cannot start may stop preemptible
// VMs of lower priority (Options.Preempt): the fewest that make room, after
// a notice, never before they have run their minimum. Every request that
// waits gets a Reason (no capacity, held, reservation, draining,
// unavailable, quota, window, preempting) and its position.
package scheduler
