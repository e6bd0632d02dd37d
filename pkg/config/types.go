package config

import (
	"encoding/json"
	"sort"
	"time"

	"github.com/gpuvm/gpuvm/pkg/gpu"

	"github.com/hashicorp/hcl/v2"
	"github.com/zclconf/go-cty/cty"
)

// The resolved configuration: every default filled in, sizes in bytes,
// durations as time.Duration, names checked. Each value keeps the range of the
// block it came from (DeclRange) for later diagnostics.
//
// In JSON (gpuvm profile show --json) sizes are numbers of bytes and durations
// are whole numbers of seconds; the field names are the attribute names of
// the files.

// Config is one whole configuration: everything Load read from a directory.
type Config struct {
	Dir       string               `json:"dir,omitempty"`
	Files     []string             `json:"files"`
	Server    Server               `json:"server"`
	Images    map[string]*Image    `json:"images"`
	Templates map[string]*Template `json:"templates"`
	Profiles  map[string]*Profile  `json:"profiles"`
	Policy    Policy               `json:"policy"`
}

// ProfileNames returns the profile names, sorted.
func (c *Config) ProfileNames() []string { return sortedKeys(c.Profiles) }

// SortedProfiles returns the profiles sorted by name.
func (c *Config) SortedProfiles() []*Profile {
	out := make([]*Profile, 0, len(c.Profiles))
	for _, n := range c.ProfileNames() {
		out = append(out, c.Profiles[n])
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Server is how gpuvmd runs on this machine.
type Server struct {
	Listen         string   `json:"listen"`
	StateDir       string   `json:"state_dir"`
	LogLevel       string   `json:"log_level"`
	AllowFunctions []string `json:"allow_functions"`
	// Contact is whom people ask about this server (a name and email, or
	// a URL): the portal and the CLI name it where they say "ask an
	// admin"; "" for nobody in particular.
	Contact  string   `json:"contact,omitempty"`
	TLS      *TLS     `json:"tls,omitempty"`
	Database Database `json:"database"`
	Libvirt  Libvirt  `json:"libvirt"`
	Plugins  Plugins  `json:"plugins"`
	Host     Host     `json:"host"`
	Monitor  Monitor  `json:"monitor"`
	Node     Node     `json:"node"`
	HTTP     HTTP     `json:"http"`
	Audit    Audit    `json:"audit"`
	Backup   *Backup  `json:"backup,omitempty"`
	Auth     Auth     `json:"auth"`
	// Licensing is the vGPU software licensing of the guests; nil: none.
	Licensing *Licensing `json:"licensing,omitempty"`
	// Storage is where what belongs to people lives: their homes.
	Storage   Storage   `json:"storage"`
	DeclRange hcl.Range `json:"-"`
}

// Storage is the server's storage block (storage.go).
type Storage struct {
	Homes Homes `json:"homes"`
	// Shares are the admin-declared folders people's VMs may mount, by
	// name (shares.go).
	Shares map[string]*Share `json:"shares,omitempty"`
}

// Homes gives every person a directory of their own on this server,
// made the first time one of their VMs needs it and attached to each of
// their VMs over virtiofs (pkg/homes).
type Homes struct {
	// Enabled: profiles give their VMs the owner's home unless they say
	// home = false.
	Enabled bool `json:"enabled"`
	// Root is the host directory that holds one directory per person.
	Root string `json:"root"`
	// Mount is where the home appears in a Linux guest.
	Mount string `json:"mount"`
	// UIDMin and UIDMax bound the uids gpuvm assigns to people whom the
	// directory gives none (LDAP's uidNumber is taken as it is).
	UIDMin int `json:"uid_min"`
	UIDMax int `json:"uid_max"`
}

// HTTP bounds what one client of the API may hold (pkg/server's
// HTTPLimits): its headers must come within ReadHeaderTimeout, its body
// within BodyTimeout, the answer is written within WriteTimeout (the event
// stream and the websockets excepted), an idle keep-alive connection is
// closed after IdleTimeout, and one source IP holds at most MaxConnsPerIP
// connections at once (one more is closed unanswered).
type HTTP struct {
	ReadHeaderTimeout time.Duration `json:"read_header_timeout"`
	BodyTimeout       time.Duration `json:"body_timeout"`
	WriteTimeout      time.Duration `json:"write_timeout"`
	IdleTimeout       time.Duration `json:"idle_timeout"`
	MaxConnsPerIP     int           `json:"max_conns_per_ip"`
	// The caps of one UDP tunnel, each direction on its own: the largest
	// datagram (bytes), datagrams and bytes a second (token buckets that
	// hold a quarter second), and how long it may carry nothing.
	UDPMaxDatagram        int           `json:"udp_max_datagram"`
	UDPDatagramsPerSecond int           `json:"udp_datagrams_per_second"`
	UDPBytesPerSecond     int64         `json:"udp_bytes_per_second"`
	UDPIdleTimeout        time.Duration `json:"udp_idle_timeout"`
}

// MarshalJSON writes durations as whole seconds.
func (h HTTP) MarshalJSON() ([]byte, error) {
	type plain HTTP
	return json.Marshal(struct {
		plain
		ReadHeaderTimeout int64 `json:"read_header_timeout"`
		BodyTimeout       int64 `json:"body_timeout"`
		WriteTimeout      int64 `json:"write_timeout"`
		IdleTimeout       int64 `json:"idle_timeout"`
		UDPIdleTimeout    int64 `json:"udp_idle_timeout"`
	}{plain(h), secs(h.ReadHeaderTimeout), secs(h.BodyTimeout), secs(h.WriteTimeout), secs(h.IdleTimeout), secs(h.UDPIdleTimeout)})
}

// Audit says how gpuvmd keeps its audit log: every state-changing request
// and every console or tunnel opened (pkg/server).
type Audit struct {
	// Retention is how long entries are kept (gpuvmd deletes older ones
	// periodically); 0 keeps them forever.
	Retention time.Duration `json:"retention"`
	// Log also writes every entry as a structured log line at info, for
	// journald and log shippers.
	Log bool `json:"log"`
}

// MarshalJSON writes the retention as whole seconds.
func (a Audit) MarshalJSON() ([]byte, error) {
	type plain Audit
	return json.Marshal(struct {
		plain
		Retention int64 `json:"retention"`
	}{plain(a), secs(a.Retention)})
}

// Node is this server as a node of a fleet: several gpuvmds that share one
// PostgreSQL database (pkg/fleet).
type Node struct {
	// Name names the node in the database (the hosts table, VMs' host);
	// "" is the machine's hostname.
	Name string `json:"name,omitempty"`
	// HeartbeatInterval is how often gpuvmd writes its heartbeat and
	// inventory; a node whose heartbeat is older than HeartbeatTimeout is
	// down: its capacity leaves scheduling, its VMs show host-down.
	HeartbeatInterval time.Duration `json:"heartbeat_interval"`
	HeartbeatTimeout  time.Duration `json:"heartbeat_timeout"`
}

// MarshalJSON writes durations as whole seconds.
func (n Node) MarshalJSON() ([]byte, error) {
	type plain Node
	return json.Marshal(struct {
		plain
		HeartbeatInterval int64 `json:"heartbeat_interval"`
		HeartbeatTimeout  int64 `json:"heartbeat_timeout"`
	}{plain(n), secs(n.HeartbeatInterval), secs(n.HeartbeatTimeout)})
}

// Backup is gpuvmd's schedule of backups of itself (gpuvmd backup; README,
// "Operations"); nil without a backup block: no scheduled backup.
type Backup struct {
	// Every is the time between two backups.
	Every time.Duration `json:"every"`
	// Keep is how many of its archives gpuvmd keeps in Dir; older ones
	// (of its own name pattern only) are deleted after each backup.
	Keep int `json:"keep"`
	// Dir is where the archives are written.
	Dir string `json:"dir"`
}

// MarshalJSON writes durations as whole seconds.
func (b Backup) MarshalJSON() ([]byte, error) {
	type plain Backup
	return json.Marshal(struct {
		plain
		Every int64 `json:"every"`
	}{plain(b), secs(b.Every)})
}

// Monitor says how gpuvmd samples its GPUs and keeps the samples
// (pkg/monitor).
type Monitor struct {
	// Interval is the time between two sampling rounds.
	Interval time.Duration `json:"interval"`
	// RawRetention is how long raw samples are kept; older ones are
	// averaged into Downsample periods.
	RawRetention time.Duration `json:"raw_retention"`
	Downsample   time.Duration `json:"downsample"`
	// DownsampledRetention is how long the averages are kept.
	DownsampledRetention time.Duration `json:"downsampled_retention"`
	// IdleThreshold is the GPU utilisation (percent) under which a VM's
	// GPU counts as idle.
	IdleThreshold float64 `json:"idle_threshold"`
	// MetricsAuth is who may read /metrics: MetricsAuthNone (anyone) or
	// MetricsAuthToken (any valid API token).
	MetricsAuth string `json:"metrics_auth"`
}

// Who may read /metrics.
const (
	MetricsAuthNone  = "none"
	MetricsAuthToken = "token"
)

// MarshalJSON writes durations as whole seconds.
func (m Monitor) MarshalJSON() ([]byte, error) {
	type plain Monitor
	return json.Marshal(struct {
		plain
		Interval             int64 `json:"interval"`
		RawRetention         int64 `json:"raw_retention"`
		Downsample           int64 `json:"downsample"`
		DownsampledRetention int64 `json:"downsampled_retention"`
	}{plain(m), secs(m.Interval), secs(m.RawRetention), secs(m.Downsample), secs(m.DownsampledRetention)})
}

// TLS names the certificate files of the API listener.
type TLS struct {
	Cert     string `json:"cert"`
	Key      string `json:"key"`
	ClientCA string `json:"client_ca,omitempty"`
}

// Database says where gpuvmd keeps its state.
type Database struct {
	Driver string `json:"driver"` // "sqlite" or "postgres"
	Path   string `json:"path,omitempty"`
	// DSN may hold a password: it is never written to JSON.
	DSN string `json:"-"`
}

// Libvirt is the hypervisor connection and where disks live.
type Libvirt struct {
	URI         string `json:"uri"`
	StoragePool string `json:"storage_pool"`
	// StoragePoolDir is the directory gpuvmd gives the pool when it
	// defines it (the pool is missing): DefaultStoragePoolRoot/<pool>
	// unless set. A pool that exists is used where it is.
	StoragePoolDir string `json:"storage_pool_dir"`
	ImagesDir      string `json:"images_dir"`
	GraphicsListen string `json:"graphics_listen"`
}

// Plugins says where the backend binaries are and which run.
type Plugins struct {
	Dir      string   `json:"dir"`
	Backends []string `json:"backends"`
}

// Enabled reports whether the backend runs.
func (p Plugins) Enabled(name string) bool {
	for _, b := range p.Backends {
		if b == name {
			return true
		}
	}
	return false
}

// Host describes the GPU server itself.
type Host struct {
	// Simulate names a simulated server preset ("h100x8"); "" on real
	// hardware.
	Simulate string         `json:"simulate,omitempty"`
	GPUs     []*GPUSettings `json:"gpus"`
}

// How a gpu block picks its GPUs.
const (
	MatchAll     = "all"
	MatchAddress = "address"
	MatchModel   = "model"
)

// GPUSettings is one gpu block of the host.
type GPUSettings struct {
	Selector string `json:"selector"` // "all", "0000:41:00.0" or a model name
	Match    string `json:"match"`    // MatchAll, MatchAddress or MatchModel
	// Model is the board the admin says is there (address and all
	// selectors), or the selector's model name.
	Model     string    `json:"model,omitempty"`
	Mode      gpu.Mode  `json:"mode"`
	MixedSize bool      `json:"mixed_size"`
	MIGLayout []string  `json:"mig_layout,omitempty"`
	DeclRange hcl.Range `json:"-"`
}

// Image is a base disk image that profiles start from.
type Image struct {
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	Path        string `json:"path,omitempty"`   // a file (qcow2 or raw)
	Volume      string `json:"volume,omitempty"` // or a libvirt volume
	Pool        string `json:"pool,omitempty"`   // the volume's pool
	Format      string `json:"format"`           // "qcow2" or "raw"
	OS          string `json:"os"`               // "linux" or "windows"
	Firmware    string `json:"firmware"`         // "bios" or "uefi"
	User        string `json:"user,omitempty"`   // default user of the image
	// DriversISO is an ISO attached as a CD-ROM to every VM of the image:
	// the virtio-win drivers for Windows guests.
	DriversISO string `json:"drivers_iso,omitempty"`
	// Imported names an image imported or published with `gpuvm admin
	// image` (the store's images); Version pins one of its versions, 0
	// follows the newest. Path and Format are then the record's, read
	// when a VM is created (pkg/images.Resolve).
	Imported string `json:"imported,omitempty"`
	Version  int    `json:"version,omitempty"`
	// GuestDriver is the version of the NVIDIA guest driver the image
	// carries ("550.90.07"), as its admin declares it; a vGPU VM of it on
	// a host whose vGPU manager does not take that driver's release is
	// warned about (gpu.CheckGuestDriver).
	GuestDriver string    `json:"guest_driver,omitempty"`
	DeclRange   hcl.Range `json:"-"`
}

// Profile is what a person may ask for, resolved.
type Profile struct {
	Name        string     `json:"name"`
	Description string     `json:"description,omitempty"`
	VCPUs       int        `json:"vcpus"`
	Memory      uint64     `json:"memory"`
	Disk        *Disk      `json:"disk,omitempty"`
	Boot        *Boot      `json:"boot,omitempty"`
	Firmware    string     `json:"firmware"`
	TPM         bool       `json:"tpm"`
	OS          string     `json:"os"`
	Network     Network    `json:"network"`
	Display     Display    `json:"display"`
	Desktop     Desktop    `json:"desktop"`
	CloudInit   *CloudInit `json:"cloud_init,omitempty"`
	GPU         *GPUNeed   `json:"gpu,omitempty"`
	Lease       Lease      `json:"lease"`
	Users       []string   `json:"users"`  // empty with Groups empty: everyone
	Groups      []string   `json:"groups"` // empty with Users empty: everyone
	Class       string     `json:"class"`  // ClassInteractive or ClassBatch
	Priority    int        `json:"priority"`
	// Licensing is the server's licensing with the profile's own block
	// over it; nil (or not Enabled): its guests get no token.
	Licensing *Licensing `json:"licensing,omitempty"`
	// Home: the owner's home (Server.Storage.Homes) is attached to the
	// VM and mounted in its guest.
	Home bool `json:"home"`
	// Shares are mounted in every VM of the profile (Server.Storage.Shares
	// names), beside those the person asks for.
	Shares []string `json:"shares,omitempty"`
	// Source is "file:line" of the profile block.
	Source    string    `json:"source"`
	DeclRange hcl.Range `json:"-"`
}

// Scheduling classes.
const (
	ClassInteractive = "interactive"
	ClassBatch       = "batch"
)

// Open reports whether everyone may use the profile.
func (p *Profile) Open() bool { return len(p.Users) == 0 && len(p.Groups) == 0 }

// Allows reports whether a user who belongs to groups may use the profile.
func (p *Profile) Allows(user string, groups []string) bool {
	if p.Open() {
		return true
	}
	for _, u := range p.Users {
		if u == user {
			return true
		}
	}
	for _, g := range p.Groups {
		for _, h := range groups {
			if g == h {
				return true
			}
		}
	}
	return false
}

// Disk is a profile's system disk: an overlay on a base image.
type Disk struct {
	Image string `json:"image"`
	// Size grows the overlay to this many bytes; 0 keeps the image's size.
	Size uint64 `json:"size,omitempty"`
}

// Boot is direct kernel boot.
type Boot struct {
	Kernel  string `json:"kernel"`
	Initrd  string `json:"initrd,omitempty"`
	Cmdline string `json:"cmdline,omitempty"`
}

// Network is the VM's one network interface.
type Network struct {
	Type   string `json:"type"` // "network", "bridge" or "none"
	Source string `json:"source,omitempty"`
	Model  string `json:"model,omitempty"`
}

// Display is the VM's libvirt display.
type Display struct {
	Type        string `json:"type"` // "vnc", "spice" or "none"
	VGPUDisplay bool   `json:"vgpu_display"`
}

// CloudInit names the template that makes the VM's cloud-init seed and the
// values of its variables.
type CloudInit struct {
	Template string          `json:"template"`
	Vars     json.RawMessage `json:"vars,omitempty"`
	vars     map[string]cty.Value
	// password: the template uses password_hash (the VM's one-time
	// desktop password reaches the guest).
	password bool
}

// GPUNeed is what GPU a profile's VM gets.
type GPUNeed struct {
	// Kind is gpu.KindVGPU, KindMIG, KindPassthrough, or KindAny for an abstract
	// need the scheduler meets with the cheapest fitting slice of Kinds.
	Kind    gpu.Kind `json:"kind"`
	Type    string   `json:"type,omitempty"`    // vGPU type, canonical ("L40S-12Q")
	Profile string   `json:"profile,omitempty"` // MIG profile ("3g.40gb")
	// Model restricts the boards: exact or family ("H100") as written.
	Model string `json:"model,omitempty"`
	Count int    `json:"count"`
	// Memory is the framebuffer of one device in bytes: the type's or the
	// profile's, the smallest matching board's for passthrough, or the
	// minimum asked for by an abstract need.
	Memory uint64     `json:"memory"`
	Kinds  []gpu.Kind `json:"kinds,omitempty"`  // abstract needs only
	Series string     `json:"series,omitempty"` // abstract needs: vGPU series allowed
}

// Lease is how long a VM of the profile runs.
type Lease struct {
	Default time.Duration `json:"default"`
	Max     time.Duration `json:"max"`
	// IdleStop stops a VM whose GPU has been idle this long; 0: never.
	IdleStop time.Duration `json:"idle_stop"`
	// WarnBefore is how long before the lease ends its owner is warned;
	// 0: never.
	WarnBefore time.Duration `json:"warn_before"`
	// OnEnd is what happens when the lease ends: LeaseEndStop (stopped,
	// then deleted after Grace), LeaseEndDelete or LeaseEndKeep (stopped,
	// and kept until its owner extends or deletes it).
	OnEnd string        `json:"on_end"`
	Grace time.Duration `json:"grace"`
}

// MaxLeaseHours bounds every lease in hours (ten years), whatever a profile
// says: leases become time.Durations and times, which it keeps far from
// overflowing.
const MaxLeaseHours = 10 * 365 * 24

// MaxHours is the longest lease in whole hours (a part of an hour does not
// count): lease.max's, within MaxLeaseHours.
func (l Lease) MaxHours() int {
	h := MaxLeaseHours
	if l.Max > 0 {
		h = min(h, int(l.Max/time.Hour))
	}
	return h
}

// DefaultHours is the lease of a VM asked for without hours: lease.default
// rounded up to whole hours, at least 1, at most MaxHours (or 1).
func (l Lease) DefaultHours() int {
	h := max(1, int((min(l.Default, MaxLeaseHours*time.Hour)+time.Hour-1)/time.Hour))
	return min(h, max(l.MaxHours(), 1))
}

// What happens at the end of a lease.
const (
	LeaseEndStop   = "stop"
	LeaseEndDelete = "delete"
	LeaseEndKeep   = "keep"
)

// MarshalJSON writes durations as whole seconds.
func (l Lease) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Default    int64  `json:"default"`
		Max        int64  `json:"max"`
		IdleStop   int64  `json:"idle_stop"`
		WarnBefore int64  `json:"warn_before"`
		OnEnd      string `json:"on_end"`
		Grace      int64  `json:"grace"`
	}{secs(l.Default), secs(l.Max), secs(l.IdleStop), secs(l.WarnBefore), l.OnEnd, secs(l.Grace)})
}

func secs(d time.Duration) int64 { return int64(d / time.Second) }

// Policy is the rules of sharing.
type Policy struct {
	Timezone     string                `json:"timezone,omitempty"`
	Location     *time.Location        `json:"-"`
	Queue        Queue                 `json:"queue"`
	Defaults     Principal             `json:"defaults"`
	Users        map[string]*Principal `json:"users"`
	Groups       map[string]*Principal `json:"groups"`
	Windows      []*Window             `json:"windows"`
	Reservations *Reservations         `json:"reservations,omitempty"`
	Alerts       []*Alert              `json:"alerts"`
	// Webhook receives the notices to VMs' owners (api.VMWarningPayload
	// events: a lease ending, a VM stopped or deleted by a rule); "":
	// none.
	Webhook   string    `json:"webhook,omitempty"`
	DeclRange hcl.Range `json:"-"`
}

// Queue orders.
const (
	OrderFIFO      = "fifo"
	OrderPriority  = "priority"
	OrderSJF       = "sjf"
	OrderFairshare = "fairshare"
)

// Queue is how waiting requests are ordered.
type Queue struct {
	Order string `json:"order"`
	// HalfLife is how fast past usage is forgotten (fairshare).
	HalfLife time.Duration `json:"half_life"`
}

// MarshalJSON writes durations as whole seconds.
func (q Queue) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Order    string `json:"order"`
		HalfLife int64  `json:"half_life"`
	}{q.Order, secs(q.HalfLife)})
}

// Principal is the policy of a user, a group, or the defaults.
type Principal struct {
	Name        string        `json:"name,omitempty"`
	Priority    int           `json:"priority"`
	Preemptible bool          `json:"preemptible"`
	Quota       Quota         `json:"quota"`
	Snapshots   Snapshots     `json:"snapshots"`
	Storage     StorageLimits `json:"storage"`
	DeclRange   hcl.Range     `json:"-"`
}

// StorageLimits limits what one person keeps on the server's disks, in
// bytes. A nil limit is no limit. Rule says where the limits come from
// ("policy defaults", "policy user alice", "policy group render"), for
// refusals and warnings.
type StorageLimits struct {
	// HomeQuota bounds the person's home (storage.homes).
	HomeQuota *uint64 `json:"home_quota,omitempty"`
	// DiskQuota bounds the sum of the sizes of the person's data disks.
	DiskQuota *uint64 `json:"disk_quota,omitempty"`
	Rule      string  `json:"-"`
}

// MaxSnapshots bounds snapshots.keep.
const MaxSnapshots = 1000

// Snapshots limits one person's disk snapshots. A nil limit is no limit.
// Rule says where the limits come from ("policy defaults", "policy user
// alice", "policy group render"), for refusals and expiries.
type Snapshots struct {
	// Keep is the most snapshots a person keeps, over all their VMs.
	Keep *int `json:"keep,omitempty"`
	// ExpireAfter: a snapshot older than this is deleted by the rules
	// loop, the oldest first.
	ExpireAfter *time.Duration `json:"expire_after,omitempty"`
	Rule        string         `json:"-"`
}

// Quota limits one user. A nil limit is no limit.
type Quota struct {
	VMs              *int     `json:"vms,omitempty"`
	GPUs             *int     `json:"gpus,omitempty"`   // whole GPUs at once
	Slices           *int     `json:"slices,omitempty"` // vGPUs and MIG instances at once
	GPUMemory        *uint64  `json:"gpu_memory,omitempty"`
	GPUHoursPerDay   *float64 `json:"gpu_hours_per_day,omitempty"`
	GPUHoursPerWeek  *float64 `json:"gpu_hours_per_week,omitempty"`
	GPUHoursPerMonth *float64 `json:"gpu_hours_per_month,omitempty"`
}

// HasBudget reports whether q has a GPU-hour budget (per day, week or
// month), which counts what has run, not only what runs now.
func (q Quota) HasBudget() bool {
	return q.GPUHoursPerDay != nil || q.GPUHoursPerWeek != nil || q.GPUHoursPerMonth != nil
}

// At-end actions of a window.
const (
	AtEndWarn    = "warn"
	AtEndStop    = "stop"
	AtEndNothing = "nothing"
)

// Window is a weekly time window and what may start in it.
type Window struct {
	Name string `json:"name"`
	// As written: Days and Hours, or From and To.
	Days       string        `json:"days,omitempty"`
	Hours      string        `json:"hours,omitempty"`
	From       string        `json:"from,omitempty"`
	To         string        `json:"to,omitempty"`
	Classes    []string      `json:"classes"`
	AtEnd      string        `json:"at_end"`
	WarnBefore time.Duration `json:"warn_before"`
	// Spans are the minutes of the week the window covers, [start, end)
	// from Monday 00:00, none crossing the week's end.
	Spans     []Span    `json:"-"`
	DeclRange hcl.Range `json:"-"`
}

// MarshalJSON writes durations as whole seconds.
func (w Window) MarshalJSON() ([]byte, error) {
	type plain Window
	return json.Marshal(struct {
		plain
		WarnBefore int64 `json:"warn_before"`
	}{plain(w), secs(w.WarnBefore)})
}

// Span is a stretch of the week in minutes from Monday 00:00.
type Span struct{ Start, End int }

// Reservations say who may book GPUs ahead. A nil *Reservations: nobody books.
type Reservations struct {
	Users     []string      `json:"users"`    // with Groups empty: everyone
	Groups    []string      `json:"groups"`   //
	Profiles  []string      `json:"profiles"` // empty: every profile
	MaxAhead  time.Duration `json:"max_ahead"`
	MaxLength time.Duration `json:"max_length"`
	MaxVMs    int           `json:"max_vms"`
	MaxActive int           `json:"max_active"`
}

// MarshalJSON writes durations as whole seconds.
func (r Reservations) MarshalJSON() ([]byte, error) {
	type plain Reservations
	return json.Marshal(struct {
		plain
		MaxAhead  int64 `json:"max_ahead"`
		MaxLength int64 `json:"max_length"`
	}{plain(r), secs(r.MaxAhead), secs(r.MaxLength)})
}

// Alert is a rule on a metric.
type Alert struct {
	Name      string        `json:"name"`
	Metric    string        `json:"metric"`
	Above     *float64      `json:"above,omitempty"`
	Below     *float64      `json:"below,omitempty"`
	Duration  time.Duration `json:"duration"`
	Webhook   string        `json:"webhook"`
	DeclRange hcl.Range     `json:"-"`
}

// MarshalJSON writes durations as whole seconds.
func (a Alert) MarshalJSON() ([]byte, error) {
	type plain Alert
	return json.Marshal(struct {
		plain
		Duration int64 `json:"duration"`
	}{plain(a), secs(a.Duration)})
}
