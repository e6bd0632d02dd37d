package api

// VolumeUsage is how much of its quota a volume uses: a person's home, and
// (beside it) shares and data disks. The volume listing, the portal and
// the gpuvm_volume_* metrics show it.
type VolumeUsage struct {
	// Kind is what the volume is: VolumeHome, a share or a data disk.
	Kind string `json:"kind"`
	// Owner is the person whose volume it is ("" for a share).
	Owner string `json:"owner,omitempty"`
	// Name is the volume's name (a home's is its owner's).
	Name string `json:"name"`
	// UsedBytes is what it takes on the host's disk.
	UsedBytes uint64 `json:"used_bytes"`
	// QuotaBytes is its limit; absent: none.
	QuotaBytes *uint64 `json:"quota_bytes,omitempty"`
	// Enforcement is how the quota holds: "project" (the filesystem's
	// project quotas refuse writes past it), "image" (where there are no
	// project quotas, the home is a filesystem image of the quota's size,
	// loop-mounted: writes past it are refused, "No space left on
	// device") or "none" (usage is measured every few minutes, nothing is
	// refused); Note says why, or, for an image, when it is not the
	// quota's size.
	Enforcement string `json:"enforcement"`
	Note        string `json:"note,omitempty"`
}

// EventVolumeWarning is the type of the notice a volume's owner gets when
// it reaches QuotaWarnPercent of its quota (once; again after it went
// below and came back). It is the person's event, of no VM (vm_id is
// empty). Its payload is a VolumeWarningPayload.
const EventVolumeWarning = "volume.warning"

// QuotaWarnPercent is the share of a quota past which its owner is warned.
const QuotaWarnPercent = 90

// VolumeWarningPayload is the payload of a volume.warning event.
type VolumeWarningPayload struct {
	VolumeUsage
	// Percent is UsedBytes as a whole percentage of QuotaBytes.
	Percent int `json:"percent"`
	// Reason is the notice in words (English; the portal has its own).
	Reason string `json:"reason"`
}
