// Package policy holds gpuvm's rules of sharing and applies them through
// the scheduler's cycle (it implements scheduler.Policy):
//
//   - queue order: fifo, priority, sjf (shortest lease first) or fairshare
//     (Slurm's classic fair-share factor F = 2^(−U/S) on usage decayed with a
//     half-life, weighted by the share of GPU held, plus an age factor);
//   - quotas per user (the policy's user, group and default blocks) and,
//     optionally, per group in total: VMs, whole GPUs, slices and GPU memory
//     at once, GPU-hours per calendar day, week and month. A request that
//     could never fit is refused at once; one that could later waits;
//   - time windows: a class starts only where a window allows it, a batch
//     VM that is not preemptible never starts if its lease would run into a
//     window that forbids batch, and at a window's end the VMs that started
//     in it are warned, then stopped, as the window says;
//   - bookings (Book): capacity held ahead for a user or group, once or on
//     recurring weekday slots, pinned to exact devices; nothing else starts
//     if its lease would run into them;
//   - leases: extension within the profile's maximum and only where no
//     booking or window forbids it (Engine.Extend); idle stop (IdleStop).
//
// Preemption (priority and preemptibility are separate) is a mechanism of
// the scheduler's cycle, tuned by scheduler.Options.
//
// Like pkg/scheduler it is pure: no I/O, no clock; callers pass now.
package policy
