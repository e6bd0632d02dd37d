package config

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/hashicorp/hcl/v2"

	"github.com/gpuvm/gpuvm/pkg/gpu"
)

// Defaults of the server block.
const (
	DefaultListen      = "127.0.0.1:8080"
	DefaultStateDir    = "/var/lib/gpuvm"
	DefaultLibvirtURI  = "qemu:///system"
	DefaultStoragePool = "gpuvm"
	// DefaultStoragePoolRoot holds the directory of a storage pool that
	// gpuvmd defines (DefaultStoragePoolRoot/<pool>): libvirt's own images
	// directory, which QEMU (user libvirt-qemu) can reach. Not the state
	// directory, which is 0750 and root's.
	DefaultStoragePoolRoot = "/var/lib/libvirt/images"
	DefaultPluginDir       = "/usr/lib/gpuvm/plugins"
	DefaultGraphicsListen  = "127.0.0.1"
)

// Backends lists the GPU backends gpuvm has (plugins/*), in the order they
// are started.
var Backends = []string{"vgpu", "mig", "passthrough"}

var logLevels = []string{"debug", "info", "warn", "error"}

func (r *resolver) resolveServer(b *serverBlock) {
	s := &r.cfg.Server
	if b == nil {
		b = &serverBlock{}
	}
	s.DeclRange = b.DefRange
	s.Listen = str(b.Listen, DefaultListen)
	if err := checkListen(s.Listen); err != nil {
		r.errf(valueRange(b.Body, "listen", b.DefRange), "Invalid listen address", "%v.", err)
	}
	s.StateDir = r.path(str(b.StateDir, DefaultStateDir), valueRange(b.Body, "state_dir", b.DefRange))
	if b.StateDir != nil && *b.StateDir == "" {
		r.errf(valueRange(b.Body, "state_dir", b.DefRange), "Invalid state_dir", "state_dir may not be empty.")
	}
	s.LogLevel = str(b.LogLevel, "info")
	r.oneOf(b.Body, "log_level", s.LogLevel, logLevels, b.DefRange)
	if b.Contact != nil {
		s.Contact = strings.TrimSpace(*b.Contact)
		if err := checkContact(s.Contact); err != nil {
			r.errf(valueRange(b.Body, "contact", b.DefRange), "Invalid contact", "%v.", err)
		}
	}
	s.AllowFunctions = []string{}
	for i, f := range b.AllowFunctions {
		rng := listItemRange(b.Body, "allow_functions", i, b.DefRange)
		if !contains(gatedFunctions, f) {
			r.errf(rng, "Invalid allow_functions", "%q is not a function that can be allowed; those are %s. The pure functions (%s) are always available.%s",
				f, quoteList(gatedFunctions), strings.Join(PureFunctionNames(), ", "), suggestion(f, gatedFunctions))
			continue
		}
		s.AllowFunctions = append(s.AllowFunctions, f)
	}
	r.checkDuplicates(b.Body, "allow_functions", b.AllowFunctions, b.DefRange)

	if t := b.TLS; t != nil {
		s.TLS = &TLS{
			Cert: r.path(t.Cert, t.DefRange),
			Key:  r.path(t.Key, t.DefRange),
		}
		for _, a := range []struct{ name, v string }{{"cert", t.Cert}, {"key", t.Key}} {
			if a.v == "" {
				r.errf(valueRange(t.Body, a.name, t.DefRange), "Invalid "+a.name, "The TLS %s file may not be empty.", a.name)
			}
		}
		if t.ClientCA != nil {
			s.TLS.ClientCA = r.path(*t.ClientCA, t.DefRange)
		}
	} else if !strings.HasPrefix(s.Listen, "unix:") && !isLoopback(s.Listen) {
		r.warnf(valueRange(b.Body, "listen", b.DefRange), "API served without TLS",
			"gpuvmd listens on %s, beyond this machine, without a tls block: API tokens and console passwords would cross the network in clear text.", s.Listen)
	}

	r.resolveDatabase(b.Database)
	r.resolveLibvirt(b.Libvirt)
	r.resolvePlugins(b.Plugins)
	r.resolveHost(b.Host)
	r.resolveMonitor(b.Monitor)
	r.resolveNode(b.Node)
	r.resolveHTTP(b.HTTP)
	r.resolveAudit(b.Audit)
	r.resolveBackup(b.Backup)
	r.resolveAuth(b.Auth)
	r.cfg.Server.Licensing = r.resolveLicensing(b.Licensing, nil) // licensing.go
	r.resolveStorage(b.Storage)                                   // storage.go
	if b.Storage != nil {
		r.resolveShares(b.Storage.Shares) // shares.go
	}
}

// Defaults and bounds of the audit block.
const (
	// DefaultAuditRetention keeps a year and a month: a yearly review
	// still finds the whole year.
	DefaultAuditRetention = 400 * 24 * time.Hour
	DefaultAuditLog       = true
	minAuditRetention     = 24 * time.Hour
)

func (r *resolver) resolveAudit(b *auditBlock) {
	a := &r.cfg.Server.Audit
	if b == nil {
		b = &auditBlock{DefRange: r.cfg.Server.DeclRange}
	}
	var ok bool
	a.Retention, ok = r.duration(b.Body, "retention", b.Retention, DefaultAuditRetention, b.DefRange)
	if ok && a.Retention != 0 && a.Retention < minAuditRetention {
		r.errf(valueRange(b.Body, "retention", b.DefRange), "Invalid retention",
			"Audit entries are kept at least %s (or forever, with \"0\"); %s was given.", minAuditRetention, a.Retention)
	}
	a.Log = DefaultAuditLog
	if b.Log != nil {
		a.Log = *b.Log
	}
}

// Defaults and bounds of the http block.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultBodyTimeout       = 30 * time.Second
	DefaultWriteTimeout      = 2 * time.Minute
	DefaultHTTPIdleTimeout   = 2 * time.Minute
	DefaultMaxConnsPerIP     = 128
	minHTTPTimeout           = time.Second
	maxHTTPTimeout           = time.Hour
	maxConnsPerIP            = 100000

	// A UDP tunnel's caps. The largest datagram default is above what the
	// streaming desktops send (they keep under a 1500-byte MTU), the rates
	// above one 4K stream at a few hundred Mbit/s.
	DefaultUDPMaxDatagram        = 8 << 10
	DefaultUDPDatagramsPerSecond = 50000
	DefaultUDPBytesPerSecond     = 64 << 20
	DefaultUDPIdleTimeout        = 2 * time.Minute
	minUDPMaxDatagram            = 512
	MaxUDPDatagram               = 65507 // the largest UDP payload over IPv4
	maxUDPDatagramsPerSecond     = 10000000
	minUDPBytesPerSecond         = 64 << 10
	maxUDPBytesPerSecond         = 10 << 30
)

func (r *resolver) resolveHTTP(b *httpBlock) {
	h := &r.cfg.Server.HTTP
	if b == nil {
		b = &httpBlock{DefRange: r.cfg.Server.DeclRange}
	}
	for _, a := range []struct {
		name string
		p    *string
		def  time.Duration
		out  *time.Duration
	}{
		{"read_header_timeout", b.ReadHeaderTimeout, DefaultReadHeaderTimeout, &h.ReadHeaderTimeout},
		{"body_timeout", b.BodyTimeout, DefaultBodyTimeout, &h.BodyTimeout},
		{"write_timeout", b.WriteTimeout, DefaultWriteTimeout, &h.WriteTimeout},
		{"idle_timeout", b.IdleTimeout, DefaultHTTPIdleTimeout, &h.IdleTimeout},
		{"udp_idle_timeout", b.UDPIdleTimeout, DefaultUDPIdleTimeout, &h.UDPIdleTimeout},
	} {
		v, ok := r.duration(b.Body, a.name, a.p, a.def, b.DefRange)
		if ok && (v < minHTTPTimeout || v > maxHTTPTimeout) {
			r.errf(valueRange(b.Body, a.name, b.DefRange), "Invalid "+a.name,
				"%s is from %s to %s; %s was given.", a.name, FormatDuration(minHTTPTimeout), FormatDuration(maxHTTPTimeout), FormatDuration(v))
			v = a.def
		}
		*a.out = v
	}
	h.MaxConnsPerIP = DefaultMaxConnsPerIP
	if b.MaxConnsPerIP != nil {
		if n := *b.MaxConnsPerIP; n < 1 || n > maxConnsPerIP {
			r.errf(valueRange(b.Body, "max_conns_per_ip", b.DefRange), "Invalid max_conns_per_ip",
				"max_conns_per_ip is from 1 to %d; %d was given.", maxConnsPerIP, n)
		} else {
			h.MaxConnsPerIP = n
		}
	}
	h.UDPMaxDatagram = DefaultUDPMaxDatagram
	if v, ok := r.size(b.Body, "udp_max_datagram", b.UDPMaxDatagram, DefaultUDPMaxDatagram, b.DefRange); ok {
		if v < minUDPMaxDatagram || v > MaxUDPDatagram {
			r.errf(valueRange(b.Body, "udp_max_datagram", b.DefRange), "Invalid udp_max_datagram",
				"udp_max_datagram is from %dB to %dB (the largest UDP payload over IPv4); %s was given.", minUDPMaxDatagram, MaxUDPDatagram, FormatSize(v))
		} else {
			h.UDPMaxDatagram = int(v)
		}
	}
	h.UDPDatagramsPerSecond = DefaultUDPDatagramsPerSecond
	if b.UDPDatagramsPerSecond != nil {
		if n := *b.UDPDatagramsPerSecond; n < 1 || n > maxUDPDatagramsPerSecond {
			r.errf(valueRange(b.Body, "udp_datagrams_per_second", b.DefRange), "Invalid udp_datagrams_per_second",
				"udp_datagrams_per_second is from 1 to %d; %d was given.", maxUDPDatagramsPerSecond, n)
		} else {
			h.UDPDatagramsPerSecond = n
		}
	}
	h.UDPBytesPerSecond = DefaultUDPBytesPerSecond
	if v, ok := r.size(b.Body, "udp_bytes_per_second", b.UDPBytesPerSecond, DefaultUDPBytesPerSecond, b.DefRange); ok {
		if v < minUDPBytesPerSecond || v > maxUDPBytesPerSecond {
			r.errf(valueRange(b.Body, "udp_bytes_per_second", b.DefRange), "Invalid udp_bytes_per_second",
				"udp_bytes_per_second is from %s to %s; %s was given.", FormatSize(minUDPBytesPerSecond), FormatSize(maxUDPBytesPerSecond), FormatSize(v))
		} else {
			h.UDPBytesPerSecond = int64(v)
		}
	}
}

// Defaults and bounds of the backup block.
const (
	DefaultBackupEvery = 24 * time.Hour
	DefaultBackupKeep  = 7
	minBackupEvery     = 10 * time.Minute
	maxBackupKeep      = 1000
)

func (r *resolver) resolveBackup(b *backupBlock) {
	if b == nil {
		return
	}
	bk := &Backup{Keep: DefaultBackupKeep, Dir: filepath.Join(r.cfg.Server.StateDir, "backups")}
	r.cfg.Server.Backup = bk
	var ok bool
	bk.Every, ok = r.duration(b.Body, "every", b.Every, DefaultBackupEvery, b.DefRange)
	if ok && bk.Every < minBackupEvery {
		r.errf(valueRange(b.Body, "every", b.DefRange), "Invalid every",
			"Backups are at least %s apart (each copies the whole database); %s was given.", minBackupEvery, bk.Every)
	}
	if b.Keep != nil {
		bk.Keep = *b.Keep
		if bk.Keep < 1 || bk.Keep > maxBackupKeep {
			r.errf(valueRange(b.Body, "keep", b.DefRange), "Invalid keep",
				"keep is how many archives to keep, from 1 to %d; %d was given.", maxBackupKeep, bk.Keep)
		}
	}
	if b.Dir != nil {
		bk.Dir = r.path(*b.Dir, valueRange(b.Body, "dir", b.DefRange))
		if *b.Dir == "" {
			r.errf(valueRange(b.Body, "dir", b.DefRange), "Invalid dir", "The backup directory may not be empty.")
		}
	}
}

// Defaults and bounds of the node block: these are the heartbeat's
// defaults everywhere (pkg/heartbeat, pkg/fleet, the server's and the
// orchestrator's host timeout).
const (
	DefaultHeartbeatInterval = 15 * time.Second
	// HeartbeatTimeoutIntervals is how many heartbeat intervals a node may
	// miss before it is down, when heartbeat_timeout is not set.
	HeartbeatTimeoutIntervals = 3
	DefaultHeartbeatTimeout   = HeartbeatTimeoutIntervals * DefaultHeartbeatInterval
	minHeartbeatInterval      = time.Second
	maxHeartbeatInterval      = 5 * time.Minute
)

// nodeNamePattern is a node's name: a host name or one label of it.
var nodeNamePattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)

func (r *resolver) resolveNode(b *nodeBlock) {
	n := &r.cfg.Server.Node
	if b == nil {
		b = &nodeBlock{DefRange: r.cfg.Server.DeclRange}
	}
	if b.Name != nil {
		n.Name = *b.Name
		if !nodeNamePattern.MatchString(n.Name) {
			r.errf(valueRange(b.Body, "name", b.DefRange), "Invalid node name",
				"%q: a node name is 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit (e.g. \"gpu-03\"); leave name out to use the hostname.", n.Name)
		}
	}
	var ok bool
	n.HeartbeatInterval, ok = r.duration(b.Body, "heartbeat_interval", b.HeartbeatInterval, DefaultHeartbeatInterval, b.DefRange)
	if ok && (n.HeartbeatInterval < minHeartbeatInterval || n.HeartbeatInterval > maxHeartbeatInterval) {
		r.errf(valueRange(b.Body, "heartbeat_interval", b.DefRange), "Invalid heartbeat_interval",
			"The heartbeat interval is from %s to %s; %s was given.", minHeartbeatInterval, maxHeartbeatInterval, n.HeartbeatInterval)
	}
	n.HeartbeatTimeout, ok = r.duration(b.Body, "heartbeat_timeout", b.HeartbeatTimeout, HeartbeatTimeoutIntervals*n.HeartbeatInterval, b.DefRange)
	if ok && n.HeartbeatTimeout < 2*n.HeartbeatInterval {
		r.errf(valueRange(b.Body, "heartbeat_timeout", b.DefRange), "Invalid heartbeat_timeout",
			"A node is down when its heartbeat is older than heartbeat_timeout, which must be at least two heartbeat intervals (%s) so that one late heartbeat does not take a node down; %s was given.",
			2*n.HeartbeatInterval, n.HeartbeatTimeout)
	}
}

// Defaults and bounds of the monitor block.
const (
	DefaultMonitorInterval      = 10 * time.Second
	DefaultRawRetention         = 24 * time.Hour
	DefaultDownsample           = 5 * time.Minute
	DefaultDownsampledRetention = 90 * 24 * time.Hour
	DefaultIdleThreshold        = 5.0
	minMonitorInterval          = time.Second
	maxMonitorInterval          = 10 * time.Minute
)

func (r *resolver) resolveMonitor(b *monitorBlock) {
	m := &r.cfg.Server.Monitor
	if b == nil {
		b = &monitorBlock{DefRange: r.cfg.Server.DeclRange}
	}
	m.Interval, _ = r.duration(b.Body, "interval", b.Interval, DefaultMonitorInterval, b.DefRange)
	m.RawRetention, _ = r.duration(b.Body, "raw_retention", b.RawRetention, DefaultRawRetention, b.DefRange)
	m.Downsample, _ = r.duration(b.Body, "downsample", b.Downsample, DefaultDownsample, b.DefRange)
	m.DownsampledRetention, _ = r.duration(b.Body, "downsampled_retention", b.DownsampledRetention, DefaultDownsampledRetention, b.DefRange)
	if m.Interval < minMonitorInterval || m.Interval > maxMonitorInterval {
		r.errf(valueRange(b.Body, "interval", b.DefRange), "Invalid interval", "The sampling interval is from %s to %s; %s was given.", minMonitorInterval, maxMonitorInterval, m.Interval)
	}
	if m.Downsample < m.Interval || m.Downsample > 24*time.Hour || (24*time.Hour)%m.Downsample != 0 {
		r.errf(valueRange(b.Body, "downsample", b.DefRange), "Invalid downsample",
			"The downsampling period must be at least the interval (%s), at most 24h, and divide a day evenly (e.g. 1m, 5m, 15m, 1h); %s was given.", m.Interval, m.Downsample)
	}
	if m.RawRetention < m.Downsample {
		r.errf(valueRange(b.Body, "raw_retention", b.DefRange), "Invalid raw_retention", "Raw samples must be kept at least one downsampling period (%s); %s was given.", m.Downsample, m.RawRetention)
	}
	if m.DownsampledRetention < m.RawRetention {
		r.errf(valueRange(b.Body, "downsampled_retention", b.DefRange), "Invalid downsampled_retention",
			"Averages must be kept at least as long as raw samples (%s); %s was given.", m.RawRetention, m.DownsampledRetention)
	}
	m.IdleThreshold = DefaultIdleThreshold
	if b.IdleThreshold != nil {
		m.IdleThreshold = *b.IdleThreshold
		if m.IdleThreshold <= 0 || m.IdleThreshold > 100 {
			r.errf(valueRange(b.Body, "idle_threshold", b.DefRange), "Invalid idle_threshold", "A GPU utilisation in percent, above 0 and at most 100; %g was given.", m.IdleThreshold)
		}
	}
	m.MetricsAuth = str(b.MetricsAuth, MetricsAuthNone)
	r.oneOf(b.Body, "metrics_auth", m.MetricsAuth, []string{MetricsAuthNone, MetricsAuthToken}, b.DefRange)
}

func checkListen(addr string) error {
	if p, ok := strings.CutPrefix(addr, "unix:"); ok {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("%q: a unix socket needs an absolute path, e.g. unix:/run/gpuvm/gpuvm.sock", addr)
		}
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not HOST:PORT (e.g. 127.0.0.1:8080, [::1]:8080, :8080) or unix:/PATH", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q: port %q is not a number from 1 to 65535", addr, port)
	}
	if host != "" && net.ParseIP(host) == nil && !hostnameRE.MatchString(host) {
		return fmt.Errorf("%q: %q is not an IP address or host name", addr, host)
	}
	return nil
}

var hostnameRE = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]{0,252})$`)

func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (r *resolver) resolveDatabase(b *databaseBlock) {
	d := &r.cfg.Server.Database
	if b == nil {
		b = &databaseBlock{DefRange: r.cfg.Server.DeclRange}
	}
	d.Driver = str(b.Driver, "sqlite")
	if !r.oneOf(b.Body, "driver", d.Driver, []string{"sqlite", "postgres"}, b.DefRange) {
		return
	}
	switch d.Driver {
	case "sqlite":
		if b.DSN != nil {
			r.errf(attrRange(b.Body, "dsn", b.DefRange), "dsn is for postgres", "The sqlite driver keeps its database in a file: write path, or set driver = \"postgres\".")
		}
		d.Path = filepath.Join(r.cfg.Server.StateDir, "gpuvm.db")
		if b.Path != nil {
			d.Path = r.path(*b.Path, valueRange(b.Body, "path", b.DefRange))
			if *b.Path == "" {
				r.errf(valueRange(b.Body, "path", b.DefRange), "Invalid path", "The sqlite database path may not be empty.")
			}
		}
	case "postgres":
		if b.Path != nil {
			r.errf(attrRange(b.Body, "path", b.DefRange), "path is for sqlite", "The postgres driver connects with dsn = \"postgres://USER@HOST/DB?sslmode=verify-full\".")
		}
		if !has(b.Body, "dsn") {
			r.errf(b.DefRange, "Missing dsn", "driver = \"postgres\" needs dsn = \"postgres://USER@HOST:5432/DB?sslmode=verify-full\" (a password may come from ~/.pgpass or PGPASSWORD rather than the file).")
			return
		}
		d.DSN = str(b.DSN, "")
		if d.DSN == "" {
			r.errf(valueRange(b.Body, "dsn", b.DefRange), "Invalid dsn", "The PostgreSQL DSN may not be empty.")
			return
		}
		if !strings.HasPrefix(d.DSN, "postgres://") && !strings.HasPrefix(d.DSN, "postgresql://") && !strings.Contains(d.DSN, "=") {
			r.errf(valueRange(b.Body, "dsn", b.DefRange), "Invalid dsn", "A PostgreSQL DSN is a URL (postgres://USER@HOST/DB) or key=value pairs (host=… dbname=…).")
		}
	}
}

func (r *resolver) resolveLibvirt(b *libvirtBlock) {
	l := &r.cfg.Server.Libvirt
	if b == nil {
		b = &libvirtBlock{DefRange: r.cfg.Server.DeclRange}
	}
	l.URI = str(b.URI, DefaultLibvirtURI)
	if u, err := url.Parse(l.URI); err != nil || u.Scheme == "" || !strings.Contains(l.URI, "://") {
		r.errf(valueRange(b.Body, "uri", b.DefRange), "Invalid uri", "%q is not a libvirt connection URI such as qemu:///system or test:///default.", l.URI)
	}
	l.StoragePool = str(b.StoragePool, DefaultStoragePool)
	if !namePattern.MatchString(strings.ToLower(l.StoragePool)) {
		r.errf(valueRange(b.Body, "storage_pool", b.DefRange), "Invalid storage_pool", "%q is not a libvirt storage pool name.", l.StoragePool)
	}
	l.StoragePoolDir = filepath.Join(DefaultStoragePoolRoot, l.StoragePool)
	if b.StoragePoolDir != nil {
		rng := valueRange(b.Body, "storage_pool_dir", b.DefRange)
		l.StoragePoolDir = r.path(*b.StoragePoolDir, rng)
		if !filepath.IsAbs(l.StoragePoolDir) || filepath.Clean(l.StoragePoolDir) == "/" {
			r.errf(rng, "Invalid storage_pool_dir", "%q is not a directory for a storage pool: give an absolute path such as %s.", *b.StoragePoolDir, filepath.Join(DefaultStoragePoolRoot, l.StoragePool))
		} else {
			l.StoragePoolDir = filepath.Clean(l.StoragePoolDir)
		}
	}
	l.ImagesDir = filepath.Join(r.cfg.Server.StateDir, "images")
	if b.ImagesDir != nil {
		l.ImagesDir = r.path(*b.ImagesDir, valueRange(b.Body, "images_dir", b.DefRange))
	}
	l.GraphicsListen = str(b.GraphicsListen, DefaultGraphicsListen)
	if net.ParseIP(l.GraphicsListen) == nil {
		r.errf(valueRange(b.Body, "graphics_listen", b.DefRange), "Invalid graphics_listen", "%q is not an IP address; VNC and SPICE listen on an address, 127.0.0.1 by default (the web console reaches it through gpuvmd).", l.GraphicsListen)
	}
}

func (r *resolver) resolvePlugins(b *pluginsBlock) {
	p := &r.cfg.Server.Plugins
	if b == nil {
		b = &pluginsBlock{DefRange: r.cfg.Server.DeclRange}
	}
	p.Dir = DefaultPluginDir
	if b.Dir != nil {
		p.Dir = r.path(*b.Dir, valueRange(b.Body, "dir", b.DefRange))
	}
	if !has(b.Body, "backends") {
		p.Backends = append([]string{}, Backends...)
		return
	}
	p.Backends = []string{}
	for i, name := range b.Backends {
		if !contains(Backends, name) {
			r.errf(listItemRange(b.Body, "backends", i, b.DefRange), "Unknown backend", "%q is not a gpuvm backend; they are %s.%s", name, quoteList(Backends), suggestion(name, Backends))
			continue
		}
		p.Backends = append(p.Backends, name)
	}
	r.checkDuplicates(b.Body, "backends", b.Backends, b.DefRange)
	if len(b.Backends) == 0 {
		r.warnf(valueRange(b.Body, "backends", b.DefRange), "No backend enabled", "With backends = [] no VM can have a GPU.")
	}
}

var pciAddressRE = regexp.MustCompile(`^(?:([0-9a-fA-F]{4}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$`)

// normalizePCI writes a PCI address as sysfs does: "0000:41:00.0".
func normalizePCI(s string) (string, bool) {
	m := pciAddressRE.FindStringSubmatch(s)
	if m == nil {
		return "", false
	}
	dom := m[1]
	if dom == "" {
		dom = "0000"
	}
	return strings.ToLower(fmt.Sprintf("%s:%s:%s.%s", dom, m[2], m[3], m[4])), true
}

var modes = []string{string(gpu.ModeVGPU), string(gpu.ModeMIG), string(gpu.ModePassthrough), string(gpu.ModeAuto)}

func (r *resolver) resolveHost(b *hostBlock) {
	h := &r.cfg.Server.Host
	h.GPUs = []*GPUSettings{}
	if b == nil {
		return
	}
	if b.Simulate != nil {
		h.Simulate = *b.Simulate
		if _, ok := simPresets[h.Simulate]; !ok {
			names := sortedKeys(simPresets)
			r.errf(valueRange(b.Body, "simulate", b.DefRange), "Unknown simulator preset", "%q is not a simulated server; the presets are %s.%s", h.Simulate, quoteList(names), suggestion(h.Simulate, names))
			h.Simulate = ""
		}
	}
	if len(b.GPUs) > MaxGPUBlocks {
		r.errf(b.GPUs[MaxGPUBlocks].DefRange, "Too many gpu blocks", "A host may have at most %d gpu blocks.", MaxGPUBlocks)
		b.GPUs = b.GPUs[:MaxGPUBlocks]
	}
	seen := map[string]hcl.Range{}
	for _, g := range b.GPUs {
		s := r.resolveGPUSettings(g)
		if s == nil {
			continue
		}
		key := s.Match + ":" + strings.ToLower(s.Selector)
		if first, dup := seen[key]; dup {
			r.errf(g.LabelRange, "Duplicate gpu block", "Another gpu block for %q is at %s.", s.Selector, rangeString(first))
			continue
		}
		seen[key] = g.DefRange
		h.GPUs = append(h.GPUs, s)
	}
}

func (r *resolver) resolveGPUSettings(g *gpuConfigBlock) *GPUSettings {
	s := &GPUSettings{Selector: g.Selector, Mode: gpu.Mode(str(g.Mode, string(gpu.ModeAuto))), DeclRange: g.DefRange, MIGLayout: g.MIGLayout}
	ok := true
	var models []gpu.Model // the boards this block can be about
	switch addr, isAddr := normalizePCI(g.Selector); {
	case strings.EqualFold(g.Selector, "all"):
		s.Selector, s.Match = MatchAll, MatchAll
	case isAddr:
		s.Selector, s.Match = addr, MatchAddress
		if sim := r.cfg.Server.Host.Simulate; sim != "" {
			if sg, found := simGPUAt(sim, addr); found {
				m, _ := gpu.ModelByID(sg.deviceID)
				models = []gpu.Model{m}
			} else {
				r.warnf(g.LabelRange, "No such GPU", "The simulated %s server has no GPU at %s; its GPUs are at %s.", sim, addr, strings.Join(simAddresses(sim), ", "))
			}
		}
	case strings.ContainsAny(g.Selector, ":") && !isAddr:
		r.errf(g.LabelRange, "Invalid gpu selector", "%q is not a PCI address: write DOMAIN:BUS:SLOT.FUNCTION as lspci -D does, e.g. \"0000:41:00.0\".", g.Selector)
		return nil
	default:
		s.Match = MatchModel
		models = modelsMatching(g.Selector)
		if len(models) == 0 {
			r.errf(g.LabelRange, "Unknown GPU model", "%q is neither \"all\", a PCI address (\"0000:41:00.0\") nor a GPU model gpuvm knows.%s", g.Selector, suggestion(g.Selector, modelNames()))
			return nil
		}
		s.Model = g.Selector
	}
	if g.Model != nil {
		rng := valueRange(g.Body, "model", g.DefRange)
		if s.Match == MatchModel {
			r.errf(attrRange(g.Body, "model", g.DefRange), "model is implied", "This block selects GPUs by model already; model is for \"all\" and PCI-address blocks.")
		} else if m, err := exactModel(*g.Model); err != nil {
			r.errf(rng, "Unknown GPU model", "%v", err)
			ok = false
		} else {
			if len(models) == 1 && models[0].DeviceID != m.DeviceID {
				r.errf(rng, "Wrong GPU model", "The simulated GPU at %s is a %s, not a %s.", s.Selector, models[0].Name, m.Name)
			}
			models = []gpu.Model{m}
			s.Model = m.Name
		}
	}
	if !r.oneOf(g.Body, "mode", string(s.Mode), modes, g.DefRange) {
		ok = false
	}
	if g.MixedSize != nil {
		s.MixedSize = *g.MixedSize
		if s.MixedSize && s.Mode != gpu.ModeVGPU && s.Mode != gpu.ModeAuto {
			r.errf(attrRange(g.Body, "mixed_size", g.DefRange), "mixed_size needs vGPU mode", "Mixed-size vGPU mode applies to time-sliced vGPUs; this block sets mode = %q.", s.Mode)
		}
		for _, m := range models {
			if s.MixedSize && !m.VGPU {
				r.errf(attrRange(g.Body, "mixed_size", g.DefRange), "No vGPU on this model", "%s has no vGPU support, so no mixed-size mode.", m.Name)
				break
			}
		}
	}
	if has(g.Body, "mig_layout") {
		if s.Mode != gpu.ModeMIG {
			r.errf(attrRange(g.Body, "mig_layout", g.DefRange), "mig_layout needs MIG mode", "A MIG layout applies to GPUs in mode = \"mig\"; this block sets mode = %q.", s.Mode)
		}
		r.checkMIGLayout(g, models)
	}
	if !ok {
		return nil
	}
	return s
}

// checkMIGLayout checks every profile name of a layout, and, where the board
// is known, that the layout fits on it.
func (r *resolver) checkMIGLayout(g *gpuConfigBlock, models []gpu.Model) {
	for i, name := range g.MIGLayout {
		if !migProfileExists(name) {
			r.errf(listItemRange(g.Body, "mig_layout", i, g.DefRange), "Unknown MIG profile", "%q is not a MIG profile of any board (they are named like 1g.10gb, 3g.40gb, 7g.80gb).%s", name, suggestion(name, allMIGProfileNames()))
			return
		}
	}
	if len(g.MIGLayout) == 0 {
		r.errf(valueRange(g.Body, "mig_layout", g.DefRange), "Empty mig_layout", "List the GPU instances to create, e.g. [\"3g.40gb\", \"2g.20gb\", \"1g.10gb\", \"1g.10gb\"], or leave mig_layout out to let the scheduler place instances as VMs need them.")
		return
	}
	for _, m := range models {
		if m.MIG == nil {
			r.errf(valueRange(g.Body, "mig_layout", g.DefRange), "No MIG on this model", "%s does not support MIG.", m.Name)
			continue
		}
		if err := layoutFits(m, g.MIGLayout); err != nil {
			r.errf(valueRange(g.Body, "mig_layout", g.DefRange), "MIG layout does not fit", "On %s: %v.", m.Name, err)
		}
	}
}

// layoutFits looks for start slots at which every instance of the layout
// fits, as gpuvm's MIG backend would place them (largest first, trying every
// allowed start: first-fit alone fails on layouts such as 3g+2g+1g+1g, which
// need the 3g at slot 4).
func layoutFits(m gpu.Model, layout []string) error {
	var ps []gpu.MIGProfile
	for _, name := range layout {
		p, ok := m.MIG.Profile(name)
		if !ok {
			return fmt.Errorf("%s has no MIG profile %q (its profiles: %s)", m.Name, name, strings.Join(m.MIG.ProfileNames(), ", "))
		}
		ps = append(ps, p)
	}
	compute, slices := 0, 0
	for _, p := range ps {
		compute += p.Compute
		slices += p.Size
	}
	if compute > m.MIG.Compute {
		return fmt.Errorf("the instances need %d compute slices; the GPU has %d", compute, m.MIG.Compute)
	}
	if slices > m.MIG.Slices {
		return fmt.Errorf("the instances need %d memory slices; the GPU has %d", slices, m.MIG.Slices)
	}
	sortProfilesBySize(ps)
	var placed []gpu.Instance
	var firstErr error
	var place func(i int) bool
	place = func(i int) bool {
		if i == len(ps) {
			return true
		}
		starts := m.MIG.FreeStarts(placed, ps[i])
		if len(starts) == 0 && firstErr == nil {
			firstErr = fmt.Errorf("no room for %s after %s: %v", ps[i].Name, describeInstances(placed), m.MIG.CanPlace(placed, ps[i], ps[i].Starts[len(ps[i].Starts)-1]))
		}
		for _, s := range starts {
			placed = append(placed, gpu.Instance{Profile: ps[i], Start: s})
			if place(i + 1) {
				return true
			}
			placed = placed[:len(placed)-1]
		}
		return false
	}
	if place(0) {
		return nil
	}
	return firstErr
}

func describeInstances(is []gpu.Instance) string {
	if len(is) == 0 {
		return "nothing"
	}
	parts := make([]string, len(is))
	for i, x := range is {
		parts[i] = fmt.Sprintf("%s@%d", x.Profile.Name, x.Start)
	}
	return strings.Join(parts, ", ")
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if x == y {
			return true
		}
	}
	return false
}

// maxContact bounds server.contact, in characters.
const maxContact = 200

// checkContact checks server.contact: one line of at most maxContact
// characters, a name and email ("Lab IT <gpu-help@example.org>") or a
// URL, which is http, https or mailto.
func checkContact(c string) error {
	switch {
	case c == "":
		return errors.New("contact may not be empty: leave it out to name nobody")
	case utf8.RuneCountInString(c) > maxContact:
		return fmt.Errorf("contact is %d characters long; at most %d", utf8.RuneCountInString(c), maxContact)
	case strings.IndexFunc(c, unicode.IsControl) >= 0:
		return errors.New("contact must be one line of text, without control characters")
	}
	if strings.Contains(c, "://") || strings.HasPrefix(c, "mailto:") {
		u, err := url.Parse(c)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "mailto") || (u.Scheme != "mailto" && u.Host == "") {
			return fmt.Errorf("contact %q is not an http, https or mailto URL; give a name and email (Lab IT <gpu-help@example.org>) or such a URL", c)
		}
	}
	return nil
}
