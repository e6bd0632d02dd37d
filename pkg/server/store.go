package server

import (
	"context"
	"github.com/gpuvm/gpuvm/pkg/api"
	"time"

	"github.com/gpuvm/gpuvm/pkg/store"
	"github.com/gpuvm/gpuvm/pkg/usage"
)

// Store is what the API reads and writes of the database (a *store.Store),
// grouped by the routes that use it. The server uses nothing else of it.
type Store interface {
	VMStore
	TicketStore
	AccountStore
	HostStore
	BookingStore
	AuditStore
	AlertStore
	EventSource
	usage.Store
	usage.ReportStore
	LicenseStore
	SnapshotStore
	VolumeStore
	TaskStore
}

// TaskStore backs the task routes (tasks.go).
type TaskStore interface {
	GetTask(ctx context.Context, id string) (*store.Task, error)
	TaskOfVM(ctx context.Context, vmID string) (*store.Task, error)
	ListTasks(ctx context.Context, owner string, limit int) ([]store.Task, error)
	UpdateTask(ctx context.Context, id string, from []string, u store.TaskUpdate) error
	CreateTaskArray(ctx context.Context, array *store.Task, elems []store.Task) error
	ListArrayElementsAfter(ctx context.Context, arrayID string, after, limit int) ([]store.Task, bool, error)
	ArrayCounts(ctx context.Context, ids []string) (map[string]map[string]int, error)
	ListTaskAttempts(ctx context.Context, taskID string) ([]store.TaskAttempt, error)
	CancelTask(ctx context.Context, id string) (int64, error)
	CreateTaskIn(ctx context.Context, t *store.Task, vm *store.VM, spec, reason string) error
}

// LicenseStore backs the licence state of a VM's vGPUs (licensing.go).
type LicenseStore interface {
	VGPULicenses(ctx context.Context, vmID string, since time.Time) (map[string]string, error)
}

// VMStore backs the VM routes (vms.go, actions.go). Tx runs the lifecycle
// actions' read-check-write in one transaction.
type VMStore interface {
	CreateVM(ctx context.Context, vm *store.VM, opts store.CreateVMOptions) (*store.Operation, error)
	GetVM(ctx context.Context, id string) (*store.VM, error)
	GetVMs(ctx context.Context, ids []string) (map[string]*store.VM, error) // the fleet picture
	GetVMByName(ctx context.Context, owner, name string) (*store.VM, error)
	ListVMs(ctx context.Context, f store.VMFilter) (store.VMPage, error)
	UpdateVMState(ctx context.Context, id string, version int64, u store.VMUpdate) (*store.VM, error)
	ListAllocations(ctx context.Context, vmID string) ([]store.Allocation, error)
	ListAllocationsForVMs(ctx context.Context, vmIDs []string) (map[string][]store.Allocation, error)
	CreateOperation(ctx context.Context, op *store.Operation) error
	GetOperation(ctx context.Context, id string) (*store.Operation, error)
	ListOperations(ctx context.Context, vmID string) ([]store.Operation, error)
	GetIdempotencyKey(ctx context.Context, user, key string) (*store.IdempotencyKey, error)
	// TakeVMCredential gives the VM's one-time desktop password once
	// (credentials.go).
	TakeVMCredential(ctx context.Context, vmID, by string) (*store.VMCredential, error)
	// GetVMCredential is the credential without its password: the guest
	// user of the .rdp file (desktop.go).
	GetVMCredential(ctx context.Context, vmID string) (*store.VMCredential, error)
	// CredentialsReadAt is when the VMs' one-time passwords were read.
	CredentialsReadAt(ctx context.Context, vmIDs []string) (map[string]time.Time, error)
	AppendEvent(ctx context.Context, e *store.Event) error
	Tx(ctx context.Context, fn func(tx *store.Store) error) error
}

// TicketStore backs the console and tunnel tickets (console.go, tunnel.go).
type TicketStore interface {
	IssueTicket(ctx context.Context, t *store.ConsoleTicket, ttl time.Duration) (string, error)
	PeekTicket(ctx context.Context, plain string) (*store.ConsoleTicket, error)
	ConsumeTicket(ctx context.Context, plain string) (*store.ConsoleTicket, error)
	DeleteExpiredTickets(ctx context.Context, t time.Time) (int64, error)
}

// AccountStore backs users, groups and tokens (users.go, bootstrap.go).
type AccountStore interface {
	GetUser(ctx context.Context, name string) (*store.User, error)
	CreateUser(ctx context.Context, u *store.User) error
	ListUsers(ctx context.Context) ([]store.User, error)
	ListGroups(ctx context.Context) ([]store.Group, error)
	// UserGroups: a VM owner's groups, for the mode of its shares (shares.go).
	UserGroups(ctx context.Context, names []string) (map[string][]string, error)
	CreateToken(ctx context.Context, user, name string, expiresAt *time.Time) (string, *store.APIToken, error)
	ListTokens(ctx context.Context, user string) ([]store.APIToken, error)
	SetUserSSHKeys(ctx context.Context, name string, keys []string) error
	RevokeToken(ctx context.Context, user string, id int64) error
	// Sign-in (login.go).
	SignInDirectoryUser(ctx context.Context, d store.DirectoryUser) (*store.User, error)
	SessionStore
}

// SessionStore backs the sessions of sign-ins: the portal's cookie and the
// CLI's bearer sessions (login.go, oidc.go, portal.go).
type SessionStore interface {
	CreateSession(ctx context.Context, user string, o store.NewSession) (string, *store.Session, error)
	GetSession(ctx context.Context, kind, secret string) (*store.Session, *store.User, error)
	DeleteSession(ctx context.Context, secret string) error
	DeleteExpiredSessions(ctx context.Context, t time.Time) (int64, error)
}

// HostStore backs hosts, heartbeats and drains (hosts.go, drain.go,
// fleet.go).
type HostStore interface {
	ListHosts(ctx context.Context) ([]store.Host, error)
	// HostsGeneration moves with every change of the hosts or GPU drains
	// this gpuvmd writes (store.Store.HostsGeneration).
	HostsGeneration() uint64
	GetHost(ctx context.Context, name string) (*store.Host, error)
	SetHostDraining(ctx context.Context, name string, draining bool) (*store.Host, error)
	ListGPUDrains(ctx context.Context, host string) ([]store.GPUDrain, error)
	DrainGPU(ctx context.Context, d *store.GPUDrain) error
	UndrainGPU(ctx context.Context, host, gpuAddress string) (bool, error)
	// The announced changes of the hosts' vGPU manager (driverchange.go).
	AnnounceDriverChange(ctx context.Context, dc *api.DriverChange) error
	DriverChanges(ctx context.Context) ([]api.DriverChange, error)
	WithdrawDriverChange(ctx context.Context, id, by string) (*api.DriverChange, error)
}

// BookingStore backs the reservation routes (reservations.go); creating
// one goes through the Booker.
type BookingStore interface {
	ListReservations(ctx context.Context, f store.ReservationFilter) ([]store.Reservation, error)
	GetReservation(ctx context.Context, id int64) (*store.Reservation, error)
	DeleteReservation(ctx context.Context, id int64) error
	// ReservationsStamp changes when a reservation is made, changed or
	// cancelled.
	ReservationsStamp(ctx context.Context) (string, error)
	// StateStamp fingerprints what placing the queue reads (the estimates'
	// state version, estimatework.go).
	StateStamp(ctx context.Context, hostTimeout time.Duration) (string, error)
}

// AuditStore backs the audit log (audit.go).
type AuditStore interface {
	AppendAudit(ctx context.Context, e *store.AuditEntry) error
	ListAudit(ctx context.Context, f store.AuditFilter) (entries []store.AuditEntry, next int64, err error)
}

// AlertStore backs GET /v1/alerts (alerts.go).
type AlertStore interface {
	ListAlerts(ctx context.Context, f store.AlertFilter) ([]store.Alert, error)
}

var _ Store = (*store.Store)(nil)
