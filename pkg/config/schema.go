package config

import "github.com/hashicorp/hcl/v2"

// The structs in this file are the configuration language itself: gohcl
// derives the schema of every block from their tags, so an attribute or a
// block that is not here is an error ("An argument named … is not expected
// here. Did you mean …?"). docs/config.md is checked against them by
// TestDocMatchesSchema.
//
// Optional attributes are pointers so that "not written" differs from the
// zero value; resolve.go fills the defaults. Every block keeps its body and
// definition range so that semantic checks can point at the offending text.

// fileSchema is the top level of every file.
type fileSchema struct {
	Servers   []*serverBlock   `hcl:"server,block"`
	Images    []*imageBlock    `hcl:"image,block"`
	Templates []*templateBlock `hcl:"template,block"`
	Profiles  []*profileBlock  `hcl:"profile,block"`
	Policies  []*policyBlock   `hcl:"policy,block"`
}

type serverBlock struct {
	Listen         *string         `hcl:"listen,optional"`
	StateDir       *string         `hcl:"state_dir,optional"`
	LogLevel       *string         `hcl:"log_level,optional"`
	Contact        *string         `hcl:"contact,optional"`
	AllowFunctions []string        `hcl:"allow_functions,optional"`
	TLS            *tlsBlock       `hcl:"tls,block"`
	Database       *databaseBlock  `hcl:"database,block"`
	Libvirt        *libvirtBlock   `hcl:"libvirt,block"`
	Plugins        *pluginsBlock   `hcl:"plugins,block"`
	Host           *hostBlock      `hcl:"host,block"`
	Monitor        *monitorBlock   `hcl:"monitor,block"`
	Node           *nodeBlock      `hcl:"node,block"`
	HTTP           *httpBlock      `hcl:"http,block"`
	Audit          *auditBlock     `hcl:"audit,block"`
	Backup         *backupBlock    `hcl:"backup,block"`
	Auth           *authBlock      `hcl:"auth,block"`
	Licensing      *licensingBlock `hcl:"licensing,block"`
	Storage        *storageBlock   `hcl:"storage,block"`
	DefRange       hcl.Range       `hcl:",def_range"`
	Body           hcl.Body        `hcl:",body"`
}

// storageBlock says where what is a person's (not a VM's) lives on this
// server: their homes.
type storageBlock struct {
	Homes    *homesBlock   `hcl:"homes,block"`
	Shares   []*shareBlock `hcl:"share,block"`
	DefRange hcl.Range     `hcl:",def_range"`
	Body     hcl.Body      `hcl:",body"`
}

// shareBlock is a host directory an admin offers people's VMs: a group's
// datasets, a course's material (shares.go).
type shareBlock struct {
	Name        string    `hcl:"name,label"`
	Path        string    `hcl:"path"`
	Mount       *string   `hcl:"mount,optional"`
	ReadWrite   []string  `hcl:"read_write,optional"`
	ReadOnly    []string  `hcl:"read_only,optional"`
	Description *string   `hcl:"description,optional"`
	Quota       *string   `hcl:"quota,optional"`
	DefRange    hcl.Range `hcl:",def_range"`
	LabelRange  hcl.Range `hcl:"name,label_range"`
	Body        hcl.Body  `hcl:",body"`
}

// homesBlock gives every person a home that follows them to every VM.
type homesBlock struct {
	Enabled  *bool     `hcl:"enabled,optional"`
	Root     *string   `hcl:"root,optional"`
	Mount    *string   `hcl:"mount,optional"`
	UIDMin   *int      `hcl:"uid_min,optional"`
	UIDMax   *int      `hcl:"uid_max,optional"`
	DefRange hcl.Range `hcl:",def_range"`
	Body     hcl.Body  `hcl:",body"`
}

// authBlock says how people sign in: gpuvm's own users and tokens (local),
// a directory (ldap).
type authBlock struct {
	SessionTTL *string         `hcl:"session_ttl,optional"`
	Local      *localAuthBlock `hcl:"local,block"`
	LDAP       *ldapBlock      `hcl:"ldap,block"`
	OIDC       *oidcBlock      `hcl:"oidc,block"`
	DefRange   hcl.Range       `hcl:",def_range"`
	Body       hcl.Body        `hcl:",body"`
}

type localAuthBlock struct {
	Enabled    *bool     `hcl:"enabled,optional"`
	BreakGlass []string  `hcl:"break_glass,optional"`
	DefRange   hcl.Range `hcl:",def_range"`
	Body       hcl.Body  `hcl:",body"`
}

type ldapBlock struct {
	URL                *string   `hcl:"url,optional"`
	StartTLS           *bool     `hcl:"start_tls,optional"`
	CAFile             *string   `hcl:"ca_file,optional"`
	InsecureSkipVerify *bool     `hcl:"insecure_skip_verify,optional"`
	BindDN             *string   `hcl:"bind_dn,optional"`
	BindPasswordFile   *string   `hcl:"bind_password_file,optional"`
	UserBase           *string   `hcl:"user_base,optional"`
	UserFilter         *string   `hcl:"user_filter,optional"`
	UsernameAttribute  *string   `hcl:"username_attribute,optional"`
	GroupBase          *string   `hcl:"group_base,optional"`
	GroupFilter        *string   `hcl:"group_filter,optional"`
	GroupAttribute     *string   `hcl:"group_attribute,optional"`
	AdminGroups        []string  `hcl:"admin_groups,optional"`
	SyncEvery          *string   `hcl:"sync_every,optional"`
	Timeout            *string   `hcl:"timeout,optional"`
	DefRange           hcl.Range `hcl:",def_range"`
	Body               hcl.Body  `hcl:",body"`
}

type oidcBlock struct {
	Issuer           *string   `hcl:"issuer,optional"`
	ClientID         *string   `hcl:"client_id,optional"`
	ClientSecretFile *string   `hcl:"client_secret_file,optional"`
	RedirectURL      *string   `hcl:"redirect_url,optional"`
	DeviceClientID   *string   `hcl:"device_client_id,optional"`
	DisplayName      *string   `hcl:"display_name,optional"`
	Scopes           []string  `hcl:"scopes,optional"`
	UsernameClaim    *string   `hcl:"username_claim,optional"`
	GroupsClaim      *string   `hcl:"groups_claim,optional"`
	AdminGroups      []string  `hcl:"admin_groups,optional"`
	AllowedGroups    []string  `hcl:"allowed_groups,optional"`
	DefRange         hcl.Range `hcl:",def_range"`
	Body             hcl.Body  `hcl:",body"`
}

// httpBlock bounds what one client of the API may hold.
type httpBlock struct {
	ReadHeaderTimeout *string `hcl:"read_header_timeout,optional"`
	BodyTimeout       *string `hcl:"body_timeout,optional"`
	WriteTimeout      *string `hcl:"write_timeout,optional"`
	IdleTimeout       *string `hcl:"idle_timeout,optional"`
	MaxConnsPerIP     *int    `hcl:"max_conns_per_ip,optional"`
	// The caps of one UDP tunnel (server.UDPLimits).
	UDPMaxDatagram        *string   `hcl:"udp_max_datagram,optional"`
	UDPDatagramsPerSecond *int      `hcl:"udp_datagrams_per_second,optional"`
	UDPBytesPerSecond     *string   `hcl:"udp_bytes_per_second,optional"`
	UDPIdleTimeout        *string   `hcl:"udp_idle_timeout,optional"`
	DefRange              hcl.Range `hcl:",def_range"`
	Body                  hcl.Body  `hcl:",body"`
}

// auditBlock says how long the audit log is kept and whether its entries
// are logged too.
type auditBlock struct {
	Retention *string   `hcl:"retention,optional"`
	Log       *bool     `hcl:"log,optional"`
	DefRange  hcl.Range `hcl:",def_range"`
	Body      hcl.Body  `hcl:",body"`
}

// nodeBlock names this server in a fleet (several gpuvmds sharing one
// PostgreSQL database) and sets its heartbeat.
type nodeBlock struct {
	Name              *string   `hcl:"name,optional"`
	HeartbeatInterval *string   `hcl:"heartbeat_interval,optional"`
	HeartbeatTimeout  *string   `hcl:"heartbeat_timeout,optional"`
	DefRange          hcl.Range `hcl:",def_range"`
	Body              hcl.Body  `hcl:",body"`
}

// backupBlock makes gpuvmd back itself up on a schedule (gpuvmd backup).
type backupBlock struct {
	Every    *string   `hcl:"every,optional"`
	Keep     *int      `hcl:"keep,optional"`
	Dir      *string   `hcl:"dir,optional"`
	DefRange hcl.Range `hcl:",def_range"`
	Body     hcl.Body  `hcl:",body"`
}

type monitorBlock struct {
	Interval             *string   `hcl:"interval,optional"`
	RawRetention         *string   `hcl:"raw_retention,optional"`
	Downsample           *string   `hcl:"downsample,optional"`
	DownsampledRetention *string   `hcl:"downsampled_retention,optional"`
	IdleThreshold        *float64  `hcl:"idle_threshold,optional"`
	MetricsAuth          *string   `hcl:"metrics_auth,optional"`
	DefRange             hcl.Range `hcl:",def_range"`
	Body                 hcl.Body  `hcl:",body"`
}

type tlsBlock struct {
	Cert     string    `hcl:"cert"`
	Key      string    `hcl:"key"`
	ClientCA *string   `hcl:"client_ca,optional"`
	DefRange hcl.Range `hcl:",def_range"`
	Body     hcl.Body  `hcl:",body"`
}

type databaseBlock struct {
	Driver   *string   `hcl:"driver,optional"`
	Path     *string   `hcl:"path,optional"`
	DSN      *string   `hcl:"dsn,optional"`
	DefRange hcl.Range `hcl:",def_range"`
	Body     hcl.Body  `hcl:",body"`
}

type libvirtBlock struct {
	URI            *string   `hcl:"uri,optional"`
	StoragePool    *string   `hcl:"storage_pool,optional"`
	StoragePoolDir *string   `hcl:"storage_pool_dir,optional"`
	ImagesDir      *string   `hcl:"images_dir,optional"`
	GraphicsListen *string   `hcl:"graphics_listen,optional"`
	DefRange       hcl.Range `hcl:",def_range"`
	Body           hcl.Body  `hcl:",body"`
}

type pluginsBlock struct {
	Dir      *string   `hcl:"dir,optional"`
	Backends []string  `hcl:"backends,optional"`
	DefRange hcl.Range `hcl:",def_range"`
	Body     hcl.Body  `hcl:",body"`
}

type hostBlock struct {
	Simulate *string           `hcl:"simulate,optional"`
	GPUs     []*gpuConfigBlock `hcl:"gpu,block"`
	DefRange hcl.Range         `hcl:",def_range"`
	Body     hcl.Body          `hcl:",body"`
}

type gpuConfigBlock struct {
	Selector   string    `hcl:"selector,label"`
	Model      *string   `hcl:"model,optional"`
	Mode       *string   `hcl:"mode,optional"`
	MixedSize  *bool     `hcl:"mixed_size,optional"`
	MIGLayout  []string  `hcl:"mig_layout,optional"`
	DefRange   hcl.Range `hcl:",def_range"`
	LabelRange hcl.Range `hcl:"selector,label_range"`
	Body       hcl.Body  `hcl:",body"`
}

type imageBlock struct {
	Name        string    `hcl:"name,label"`
	Description *string   `hcl:"description,optional"`
	Path        *string   `hcl:"path,optional"`
	Volume      *string   `hcl:"volume,optional"`
	Pool        *string   `hcl:"pool,optional"`
	Imported    *string   `hcl:"imported,optional"`
	Version     *int      `hcl:"version,optional"`
	Format      *string   `hcl:"format,optional"`
	OS          *string   `hcl:"os,optional"`
	Firmware    *string   `hcl:"firmware,optional"`
	User        *string   `hcl:"user,optional"`
	DriversISO  *string   `hcl:"drivers_iso,optional"`
	GuestDriver *string   `hcl:"guest_driver,optional"`
	DefRange    hcl.Range `hcl:",def_range"`
	LabelRange  hcl.Range `hcl:"name,label_range"`
	Body        hcl.Body  `hcl:",body"`
}

type templateBlock struct {
	Name        string         `hcl:"name,label"`
	Description *string        `hcl:"description,optional"`
	Content     hcl.Expression `hcl:"content,optional"`
	File        *string        `hcl:"file,optional"`
	Vars        hcl.Expression `hcl:"vars,optional"`
	DefRange    hcl.Range      `hcl:",def_range"`
	LabelRange  hcl.Range      `hcl:"name,label_range"`
	Body        hcl.Body       `hcl:",body"`
}

type profileBlock struct {
	Name        string          `hcl:"name,label"`
	Description *string         `hcl:"description,optional"`
	VCPUs       *int            `hcl:"vcpus,optional"`
	Memory      *string         `hcl:"memory,optional"`
	Firmware    *string         `hcl:"firmware,optional"`
	TPM         *bool           `hcl:"tpm,optional"`
	OS          *string         `hcl:"os,optional"`
	Users       []string        `hcl:"users,optional"`
	Groups      []string        `hcl:"groups,optional"`
	Class       *string         `hcl:"class,optional"`
	Priority    *int            `hcl:"priority,optional"`
	Disk        *diskBlock      `hcl:"disk,block"`
	Boot        *bootBlock      `hcl:"boot,block"`
	Network     *networkBlock   `hcl:"network,block"`
	Display     *displayBlock   `hcl:"display,block"`
	Desktop     *desktopBlock   `hcl:"desktop,block"`
	CloudInit   *cloudInitBlock `hcl:"cloud_init,block"`
	GPU         *gpuNeedBlock   `hcl:"gpu,block"`
	Lease       *leaseBlock     `hcl:"lease,block"`
	Licensing   *licensingBlock `hcl:"licensing,block"`
	Home        *bool           `hcl:"home,optional"`
	Shares      []string        `hcl:"shares,optional"`
	DefRange    hcl.Range       `hcl:",def_range"`
	LabelRange  hcl.Range       `hcl:"name,label_range"`
	Body        hcl.Body        `hcl:",body"`
}

type diskBlock struct {
	Image    *string   `hcl:"image,optional"`
	Size     *string   `hcl:"size,optional"`
	DefRange hcl.Range `hcl:",def_range"`
	Body     hcl.Body  `hcl:",body"`
}

type bootBlock struct {
	Kernel   string    `hcl:"kernel"`
	Initrd   *string   `hcl:"initrd,optional"`
	Cmdline  *string   `hcl:"cmdline,optional"`
	DefRange hcl.Range `hcl:",def_range"`
	Body     hcl.Body  `hcl:",body"`
}

type networkBlock struct {
	Type     *string   `hcl:"type,optional"`
	Source   *string   `hcl:"source,optional"`
	Model    *string   `hcl:"model,optional"`
	DefRange hcl.Range `hcl:",def_range"`
	Body     hcl.Body  `hcl:",body"`
}

type displayBlock struct {
	Type        *string   `hcl:"type,optional"`
	VGPUDisplay *bool     `hcl:"vgpu_display,optional"`
	DefRange    hcl.Range `hcl:",def_range"`
	Body        hcl.Body  `hcl:",body"`
}

// desktopBlock says how people work on the VM: the display console, or a
// remote-desktop server in the guest reached through gpuvmd's tunnels.
type desktopBlock struct {
	Protocol    *string   `hcl:"protocol,optional"`
	Port        *int      `hcl:"port,optional"`
	WebPort     *int      `hcl:"web_port,optional"`
	Credentials *string   `hcl:"credentials,optional"`
	Session     *string   `hcl:"session,optional"`
	DefRange    hcl.Range `hcl:",def_range"`
	Body        hcl.Body  `hcl:",body"`
}

type cloudInitBlock struct {
	Template string         `hcl:"template"`
	Vars     hcl.Expression `hcl:"vars,optional"`
	DefRange hcl.Range      `hcl:",def_range"`
	Body     hcl.Body       `hcl:",body"`
}

type gpuNeedBlock struct {
	Kind     *string   `hcl:"kind,optional"`
	Type     *string   `hcl:"type,optional"`
	Profile  *string   `hcl:"profile,optional"`
	Model    *string   `hcl:"model,optional"`
	Count    *int      `hcl:"count,optional"`
	Memory   *string   `hcl:"memory,optional"`
	Kinds    []string  `hcl:"kinds,optional"`
	Series   *string   `hcl:"series,optional"`
	DefRange hcl.Range `hcl:",def_range"`
	Body     hcl.Body  `hcl:",body"`
}

type leaseBlock struct {
	Default    *string   `hcl:"default,optional"`
	Max        *string   `hcl:"max,optional"`
	IdleStop   *string   `hcl:"idle_stop,optional"`
	WarnBefore *string   `hcl:"warn_before,optional"`
	OnEnd      *string   `hcl:"on_end,optional"`
	Grace      *string   `hcl:"grace,optional"`
	DefRange   hcl.Range `hcl:",def_range"`
	Body       hcl.Body  `hcl:",body"`
}

type policyBlock struct {
	Timezone     *string            `hcl:"timezone,optional"`
	Queue        *queueBlock        `hcl:"queue,block"`
	Defaults     *defaultsBlock     `hcl:"defaults,block"`
	Users        []*principalBlock  `hcl:"user,block"`
	Groups       []*principalBlock  `hcl:"group,block"`
	Windows      []*windowBlock     `hcl:"window,block"`
	Reservations *reservationsBlock `hcl:"reservations,block"`
	Alerts       []*alertBlock      `hcl:"alert,block"`
	Webhook      *string            `hcl:"webhook,optional"`
	DefRange     hcl.Range          `hcl:",def_range"`
	Body         hcl.Body           `hcl:",body"`
}

type queueBlock struct {
	Order    *string   `hcl:"order,optional"`
	HalfLife *string   `hcl:"half_life,optional"`
	DefRange hcl.Range `hcl:",def_range"`
	Body     hcl.Body  `hcl:",body"`
}

// defaultsBlock applies to every user who has no user block of their own and
// belongs to no group that has one.
type defaultsBlock struct {
	Priority    *int                `hcl:"priority,optional"`
	Preemptible *bool               `hcl:"preemptible,optional"`
	Quota       *quotaBlock         `hcl:"quota,block"`
	Snapshots   *snapshotsBlock     `hcl:"snapshots,block"`
	Storage     *storageLimitsBlock `hcl:"storage,block"`
	DefRange    hcl.Range           `hcl:",def_range"`
	Body        hcl.Body            `hcl:",body"`
}

type principalBlock struct {
	Name        string              `hcl:"name,label"`
	Priority    *int                `hcl:"priority,optional"`
	Preemptible *bool               `hcl:"preemptible,optional"`
	Quota       *quotaBlock         `hcl:"quota,block"`
	Snapshots   *snapshotsBlock     `hcl:"snapshots,block"`
	Storage     *storageLimitsBlock `hcl:"storage,block"`
	DefRange    hcl.Range           `hcl:",def_range"`
	LabelRange  hcl.Range           `hcl:"name,label_range"`
	Body        hcl.Body            `hcl:",body"`
}

// snapshotsBlock limits a person's disk snapshots: how many they keep, and
// how long one lives.
type snapshotsBlock struct {
	Keep        *int      `hcl:"keep,optional"`
	ExpireAfter *string   `hcl:"expire_after,optional"`
	DefRange    hcl.Range `hcl:",def_range"`
	Body        hcl.Body  `hcl:",body"`
}

// storageLimitsBlock limits what a person keeps on the server's disks: their
// home and the total of their data disks.
type storageLimitsBlock struct {
	HomeQuota *string   `hcl:"home_quota,optional"`
	DiskQuota *string   `hcl:"disk_quota,optional"`
	DefRange  hcl.Range `hcl:",def_range"`
	Body      hcl.Body  `hcl:",body"`
}

type quotaBlock struct {
	VMs              *int      `hcl:"vms,optional"`
	GPUs             *int      `hcl:"gpus,optional"`
	Slices           *int      `hcl:"slices,optional"`
	GPUMemory        *string   `hcl:"gpu_memory,optional"`
	GPUHoursPerDay   *float64  `hcl:"gpu_hours_per_day,optional"`
	GPUHoursPerWeek  *float64  `hcl:"gpu_hours_per_week,optional"`
	GPUHoursPerMonth *float64  `hcl:"gpu_hours_per_month,optional"`
	DefRange         hcl.Range `hcl:",def_range"`
	Body             hcl.Body  `hcl:",body"`
}

type windowBlock struct {
	Name       string    `hcl:"name,label"`
	Days       *string   `hcl:"days,optional"`
	Hours      *string   `hcl:"hours,optional"`
	From       *string   `hcl:"from,optional"`
	To         *string   `hcl:"to,optional"`
	Classes    []string  `hcl:"classes"`
	AtEnd      *string   `hcl:"at_end,optional"`
	WarnBefore *string   `hcl:"warn_before,optional"`
	DefRange   hcl.Range `hcl:",def_range"`
	LabelRange hcl.Range `hcl:"name,label_range"`
	Body       hcl.Body  `hcl:",body"`
}

type reservationsBlock struct {
	Users     []string  `hcl:"users,optional"`
	Groups    []string  `hcl:"groups,optional"`
	Profiles  []string  `hcl:"profiles,optional"`
	MaxAhead  *string   `hcl:"max_ahead,optional"`
	MaxLength *string   `hcl:"max_length,optional"`
	MaxVMs    *int      `hcl:"max_vms,optional"`
	MaxActive *int      `hcl:"max_active,optional"`
	DefRange  hcl.Range `hcl:",def_range"`
	Body      hcl.Body  `hcl:",body"`
}

type alertBlock struct {
	Name       string    `hcl:"name,label"`
	Metric     string    `hcl:"metric"`
	Above      *float64  `hcl:"above,optional"`
	Below      *float64  `hcl:"below,optional"`
	Duration   *string   `hcl:"duration,optional"`
	Webhook    string    `hcl:"webhook"`
	DefRange   hcl.Range `hcl:",def_range"`
	LabelRange hcl.Range `hcl:"name,label_range"`
	Body       hcl.Body  `hcl:",body"`
}
