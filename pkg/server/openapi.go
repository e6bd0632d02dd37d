package server

import (
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// Who may call a route.
const (
	authNone   = "none"   // anyone
	authUser   = "user"   // any bearer token
	authAdmin  = "admin"  // an admin's bearer token
	authTicket = "ticket" // a one-time ticket in the query, no bearer token
)

// param is a query or header parameter of a route.
type param struct {
	Name, In, Description string
	Type                  string // string, integer
}

// route describes one route of the API for the OpenAPI document. The list
// (apiRoutes) is checked against the routes gin has, both ways, by a test.
type route struct {
	Method, Path, Summary, Auth string
	Params                      []param
	// Body is the request body's Go type (nil: none).
	Body any
	// Status is the success status; Answer its body's Go type (nil: none).
	Status int
	Answer any
	// ContentType of the answer when it is not JSON (an event stream, a
	// file).
	ContentType string
	// Errors are the problem statuses the route answers with, beyond the
	// authentication ones its Auth implies.
	Errors []int
}

// profileDoc stands for a profile as the API serves it: pkg/config's JSON
// and api.Profile's fields (unservable, unavailable, next_free_at) in one
// object.
type profileDoc map[string]any

var (
	pVM             = param{Name: "id", In: "path", Description: "the VM's ID, or its name among the caller's VMs", Type: "string"}
	pProfile        = param{Name: "name", In: "path", Description: "the profile's name", Type: "string"}
	pAdmissionHours = param{Name: "hours", In: "query", Description: "the lease asked for, from 1 to the profile's maximum (default: the profile's default)", Type: "integer"}
	pSnap           = param{Name: "snap", In: "path", Description: "the snapshot's ID, or its label among the VM's snapshots", Type: "string"}
	pVolume         = param{Name: "id", In: "path", Description: "the volume's ID, or its name among the caller's volumes", Type: "string"}
	pAsAdmin        = param{Name: "as_admin", In: "query", Description: "true: an admin acts on another person's volume (recorded in the audit log as an override)", Type: "string"}
	pTask           = param{Name: "id", In: "path", Description: "the task's ID", Type: "string"}
	pTaskOffset     = param{Name: "offset", In: "query", Description: "the byte offset of the output to start at (default 0)", Type: "integer"}
	pTaskFollow     = param{Name: "follow", In: "query", Description: "1: go on with the output as it comes until the task has ended", Type: "integer"}
	pOpID           = param{Name: "id", In: "path", Description: "the operation's ID", Type: "string"}
	pIdemKey        = param{Name: "Idempotency-Key", In: "header", Description: "the same key with the same body gets the same answer (24 hours)", Type: "string"}
	pAfter          = param{Name: "after", In: "query", Description: "the cursor of the next page (the previous page's next)", Type: "string"}
	pLimit          = param{Name: "limit", In: "query", Description: "page size, 1–500 (default 100)", Type: "integer"}
	pElementsAfter  = param{Name: "after", In: "query", Description: "an array's: the cursor of the next page of its elements (the previous page's elements_next)", Type: "string"}
	pElementsLimit  = param{Name: "limit", In: "query", Description: "an array's: how many of its elements, 1–1000 (default 100)", Type: "integer"}
	pVMLimit        = param{Name: "limit", In: "query", Description: "page size, 1–1000 (default 50)", Type: "integer"}
	pState          = param{Name: "state", In: "query", Description: "only VMs in this state", Type: "string"}
	pOwner          = param{Name: "owner", In: "query", Description: "only this user's (admins)", Type: "string"}
	pEvVM           = param{Name: "vm", In: "query", Description: "only this VM's events (ID or name)", Type: "string"}
	pEvAfter        = param{Name: "after", In: "query", Description: "resume after this event ID (Last-Event-ID wins)", Type: "integer"}
	pLastID         = param{Name: "Last-Event-ID", In: "header", Description: "resume after this event ID", Type: "integer"}
	pUser           = param{Name: "name", In: "path", Description: "the user's name", Type: "string"}
	pTokenID        = param{Name: "id", In: "path", Description: "the token's ID", Type: "integer"}
	pGPU            = param{Name: "addr", In: "path", Description: "the GPU's PCI address (0000:41:00.0 or 41:00.0)", Type: "string"}
	p404            = []int{http.StatusNotFound}
	pDriverChange   = param{Name: "id", In: "path", Description: "the announcement's ID", Type: "string"}

	// login.go
	pReturnTo  = param{Name: "return_to", In: "query", Description: "the portal's sign-in: a path of this server (one leading '/') where the browser goes, signed in with the session cookie, after the provider", Type: "string"}
	pRedirect  = param{Name: "redirect_uri", In: "query", Description: "a CLI's loopback sign-in (RFC 8252): http://127.0.0.1:PORT/PATH (or [::1]) where the CLI listens for the one-time code", Type: "string"}
	pChallenge = param{Name: "code_challenge", In: "query", Description: "with redirect_uri: the S256 PKCE challenge of the verifier that POST /v1/auth/oidc/token will need", Type: "string"}
	pChMethod  = param{Name: "code_challenge_method", In: "query", Description: "with redirect_uri: S256 (the only one)", Type: "string"}
	pCLIState  = param{Name: "state", In: "query", Description: "with redirect_uri: the CLI's state, sent back to redirect_uri with the code", Type: "string"}
	pOIDCState = param{Name: "state", In: "query", Description: "the state of the start", Type: "string"}
	pOIDCCode  = param{Name: "code", In: "query", Description: "the provider's authorization code", Type: "string"}

	// reservations.go
	pResID    = param{Name: "id", In: "path", Description: "the reservation's ID", Type: "integer"}
	pResFrom  = param{Name: "from", In: "query", Description: "only reservations with an occurrence ending after this RFC 3339 time (default: now)", Type: "string"}
	pResTo    = param{Name: "to", In: "query", Description: "only reservations whose first occurrence starts before this RFC 3339 time", Type: "string"}
	pResOwner = param{Name: "owner", In: "query", Description: "only this owner's: a user, or group:NAME (users: themselves or their groups)", Type: "string"}
	pCapProf  = param{Name: "profile", In: "query", Description: "the profile to count free capacity of (one the caller may use)", Type: "string"}
	pCapFrom  = param{Name: "from", In: "query", Description: "the first slot's start, an RFC 3339 time (default: this step's start, now truncated)", Type: "string"}
	pCapTo    = param{Name: "to", In: "query", Description: "the end of the last slot, an RFC 3339 time (default: a week after from; at most 840 slots)", Type: "string"}
	pCapStep  = param{Name: "step", In: "query", Description: "the slots' length, a duration from 15m to 24h (default 1h)", Type: "string"}

	// audit.go
	pAuditUser    = param{Name: "user", In: "query", Description: "only this user's entries", Type: "string"}
	pAuditOwnUser = param{Name: "user", In: "query", Description: "the caller's name, or left out; another user's is refused (403)", Type: "string"}
	pAuditVM      = param{Name: "vm", In: "query", Description: "only entries about this VM: its ID, or the name of one of the caller's VMs", Type: "string"}
	pAuditAction  = param{Name: "action", In: "query", Description: "only this action (vm.create), or every action of a kind (vm.)", Type: "string"}
	pAuditFrom    = param{Name: "from", In: "query", Description: "only entries at or after this RFC 3339 time", Type: "string"}
	pAuditTo      = param{Name: "to", In: "query", Description: "only entries before this RFC 3339 time", Type: "string"}

	// alerts.go
	pAlertState = param{Name: "state", In: "query", Description: "only alerts in this state: firing or resolved", Type: "string"}
	pAlertRule  = param{Name: "rule", In: "query", Description: "only this rule's alerts", Type: "string"}

	// usage.go, report.go
	pPeriodsUser = param{Name: "user", In: "query", Description: "whose usage (default: the caller's; another user's: admins only)", Type: "string"}
	pFrom        = param{Name: "from", In: "query", Description: "start of the range, RFC 3339 (default: 30 days before to)", Type: "string"}
	pTo          = param{Name: "to", In: "query", Description: "end of the range, RFC 3339, excluded (default: now); at most 400 days after from", Type: "string"}
	pUsageBy     = param{Name: "by", In: "query", Description: "grouping: user (default), group, profile, gpu, host or vm", Type: "string"}
	pUsageUser   = param{Name: "user", In: "query", Description: "only this user's VMs (admins; a user sees only their own)", Type: "string"}
	pTZ          = param{Name: "tz", In: "query", Description: "IANA time zone of the weekday × hour heatmaps (default: the server's)", Type: "string"}
	pIdleBelow   = param{Name: "idle_below", In: "query", Description: "utilisation (0..1) under which a VM counts as idle (default 0.1)", Type: "number"}
)

// apiRoutes is every route of the API: those of this table, and the
// console's, the fleet's, the credentials', the portal's sessions', the rules', the desktop file's and the images', which their files list.
var apiRoutes = slices.Concat(coreAPIRoutes, consoleAPIRoutes, fleetAPIRoutes, orphanAPIRoutes, credentialsAPIRoutes, sessionAPIRoutes, rulesAPIRoutes, desktopAPIRoutes, imageAPIRoutes, windowsAPIRoutes, shareAPIRoutes, homeAPIRoutes)

var coreAPIRoutes = []route{
	{Method: "GET", Path: "/healthz", Summary: "Liveness: the process answers", Auth: authNone, Status: 200, Answer: map[string]string{}},
	{Method: "GET", Path: "/readyz", Summary: "Readiness: configuration and every backend", Auth: authNone, Status: 200, Answer: map[string]string{}, Errors: []int{503}},
	{Method: "GET", Path: "/openapi.json", Summary: "This document", Auth: authNone, Status: 200, Answer: map[string]any{}},
	{Method: "GET", Path: "/v1/profiles", Summary: "The profiles the caller may use; unservable says why, when no GPU of the hosts that reported can ever give one; unavailable says why, when what one is made of (its disk image, boot kernel or initrd, cloud-init template) is not on this server, in words that name no server path; next_free_at, when none of a profile's GPU is free now, is when one is expected to free up for the caller behind the queue", Auth: authUser, Status: 200, Answer: []profileDoc{}},
	{Method: "GET", Path: "/v1/profiles/{name}/admission", Summary: "What the sharing policy would say now to the caller's asking for a VM of the profile for hours (default: the profile's): starts, waits or refused with the reason, the caller's quota and GPU-hour budgets, the window in force; nothing is made", Auth: authUser, Params: []param{pProfile, pAdmissionHours}, Status: 200, Answer: api.Admission{}, Errors: []int{404, 422, 503}},
	{Method: "GET", Path: "/v1/profiles/{name}", Summary: "One profile the caller may use; unservable says why, when no GPU of the hosts that reported can ever give it; unavailable says why, when what it is made of is not on this server", Auth: authUser, Params: []param{pProfile}, Status: 200, Answer: profileDoc{}, Errors: p404},
	{Method: "POST", Path: "/v1/vms", Summary: "Ask for a VM: it is queued, then created; one of a profile no GPU of the hosts that reported can ever give, or whose image, kernel or template is not on this server, is refused (422, field profile); a share that is not declared is refused (422, field shares[i]), one the caller may not mount too (403, naming the share and its rules)", Auth: authUser, Params: []param{pIdemKey}, Body: api.CreateVMRequest{}, Status: 202, Answer: api.CreateVMResponse{}, Errors: []int{400, 403, 404, 409, 413, 422, 503}},
	{Method: "GET", Path: "/v1/vms", Summary: "The caller's VMs (admins: everyone's), oldest first, by pages; without addresses or console (GET /v1/vms/{id} has them)", Auth: authUser, Params: []param{pAfter, pVMLimit, pState, pOwner}, Status: 200, Answer: api.VMList{}, Errors: []int{400, 503}},
	{Method: "GET", Path: "/v1/vms/{id}", Summary: "One VM; while it runs, also its guest's addresses and how to open its display, read live from the hypervisor (left out when it does not answer within 2s); while it is queued, its estimated start (estimated_start, estimated_start_uncertain, estimated_start_note), predicted by replaying the queue, the running leases and the reservations through the scheduler", Auth: authUser, Params: []param{pVM}, Status: 200, Answer: api.VM{}, Errors: []int{404, 503}},
	{Method: "DELETE", Path: "/v1/vms/{id}", Summary: "Delete a VM: its GPU is freed", Auth: authUser, Params: []param{pVM}, Status: 202, Answer: api.OperationResponse{}, Errors: []int{404, 409, 503}},
	{Method: "POST", Path: "/v1/vms/{id}/actions/start", Summary: "Start a stopped VM: one with a GPU queues for one again, like a new VM (possibly another GPU), then boots with its own disk; one without boots at once; no body", Auth: authUser, Params: []param{pVM}, Status: 202, Answer: api.VMActionResponse{}, Errors: []int{400, 404, 409, 413, 503}},
	{Method: "POST", Path: "/v1/vms/{id}/actions/stop", Summary: "Stop a running VM (ACPI, forced off after the shutdown timeout): it gives its GPU back and keeps its disk; its lease runs on; no body", Auth: authUser, Params: []param{pVM}, Status: 202, Answer: api.VMActionResponse{}, Errors: []int{400, 404, 409, 413, 503}},
	{Method: "POST", Path: "/v1/vms/{id}/actions/resize", Summary: "Move a stopped VM to another profile's GPU, vCPUs and memory, its disk kept: the plan first (the image's guest driver against the target's vGPU manager, the NVIDIA licence the new kind needs); dry_run answers the plan alone (200); a resize to the VM's previous_profile goes back", Auth: authUser, Params: []param{pVM}, Body: api.ResizeVMRequest{}, Status: 202, Answer: api.ResizeVMResponse{}, Errors: []int{400, 403, 404, 409, 413, 422, 503}},
	{Method: "POST", Path: "/v1/vms/{id}/actions/reboot", Summary: "Ask a running VM's guest to restart; it stays running; no body", Auth: authUser, Params: []param{pVM}, Status: 202, Answer: api.VMActionResponse{}, Errors: []int{400, 404, 409, 413, 503}},
	{Method: "GET", Path: "/v1/volumes", Summary: "The caller's data disks by name, their home (kind home, read-only) when homes are on, and their storage.disk_quota with the rule it comes from", Auth: authUser, Status: 200, Answer: api.VolumeList{}, Errors: []int{503}},
	{Method: "POST", Path: "/v1/volumes", Summary: "Make a data disk (a virtio block volume) on this host, within the caller's storage.disk_quota (409, field size, naming the rule and the figures)", Auth: authUser, Body: api.CreateVolumeRequest{}, Status: 201, Answer: api.Volume{}, Errors: []int{400, 409, 413, 422, 503}},
	{Method: "GET", Path: "/v1/volumes/{id}", Summary: "One data disk: where the guest finds it (guest_device) and the VM it is attached to", Auth: authUser, Params: []param{pVolume, pAsAdmin}, Status: 200, Answer: api.Volume{}, Errors: []int{403, 404, 422, 503}},
	{Method: "DELETE", Path: "/v1/volumes/{id}", Summary: "Delete a detached data disk and its data (attached: 409 naming the VM)", Auth: authUser, Params: []param{pVolume, pAsAdmin}, Status: 204, Errors: []int{403, 404, 409, 422, 503}},
	{Method: "POST", Path: "/v1/volumes/{id}/actions/resize", Summary: "Grow a data disk, detached or its VM stopped, within the owner's storage.disk_quota; it never shrinks", Auth: authUser, Params: []param{pVolume, pAsAdmin}, Body: api.ResizeVolumeRequest{}, Status: 200, Answer: api.Volume{}, Errors: []int{400, 403, 404, 409, 413, 422, 503}},
	{Method: "POST", Path: "/v1/volumes/{id}/actions/attach", Summary: "Attach a data disk to a VM of its owner on its host (virtio, serial = the volume's ID): a queued or stopped VM has it at its next start (200); a running one has it plugged in by an operation on its host (202, operation_id: a failed plug detaches it again); attached to another VM: 409 naming it", Auth: authUser, Params: []param{pVolume, pAsAdmin}, Body: api.AttachVolumeRequest{}, Status: 200, Answer: api.Volume{}, Errors: []int{400, 403, 404, 409, 413, 422, 503}},
	{Method: "POST", Path: "/v1/volumes/{id}/actions/detach", Summary: "Detach a data disk from its queued, stopped or failed VM (200), or unplug it from its running VM (202, state detaching, operation_id: attached until the guest lets it go; a guest that keeps it 30 s fails the operation, the disk still attached); no body", Auth: authUser, Params: []param{pVolume, pAsAdmin}, Status: 200, Answer: api.Volume{}, Errors: []int{400, 403, 404, 409, 413, 422, 503}},
	{Method: "GET", Path: "/v1/vms/{id}/snapshots", Summary: "The VM's disk snapshots, oldest first, with its owner's limit (policy snapshots.keep) and each one's expiry", Auth: authUser, Params: []param{pVM}, Status: 200, Answer: api.SnapshotList{}, Errors: []int{404, 503}},
	{Method: "POST", Path: "/v1/vms/{id}/snapshots", Summary: "Snapshot a running or stopped VM's system disk (quiesced through the guest agent when it answers, else crash-consistent), within the owner's snapshots.keep; refused with the reason GET /v1/vms/{id} gives in capabilities.disk_snapshot when it says no", Auth: authUser, Params: []param{pVM}, Body: api.CreateSnapshotRequest{}, Status: 202, Answer: api.SnapshotResponse{}, Errors: []int{400, 404, 409, 413, 422, 503}},
	{Method: "GET", Path: "/v1/vms/{id}/snapshots/{snap}", Summary: "One disk snapshot of the VM", Auth: authUser, Params: []param{pVM, pSnap}, Status: 200, Answer: api.Snapshot{}, Errors: []int{404, 409, 503}},
	{Method: "POST", Path: "/v1/vms/{id}/snapshots/{snap}/restore", Summary: "Set a stopped VM's disk back to the snapshot (what was written since is lost; the snapshot stays); the VM's state reason says it was restored; no body", Auth: authUser, Params: []param{pVM, pSnap}, Status: 202, Answer: api.SnapshotResponse{}, Errors: []int{400, 404, 409, 413, 503}},
	{Method: "DELETE", Path: "/v1/vms/{id}/snapshots/{snap}", Summary: "Delete a disk snapshot of the VM", Auth: authUser, Params: []param{pVM, pSnap}, Status: 202, Answer: api.SnapshotResponse{}, Errors: []int{400, 404, 409, 413, 503}},
	{Method: "POST", Path: "/v1/vms/{id}/actions/extend", Summary: "Add hours to the lease of a queued, running or stopped VM, up to its profile's maximum", Auth: authUser, Params: []param{pVM}, Body: api.ExtendVMRequest{}, Status: 200, Answer: api.VM{}, Errors: []int{400, 404, 409, 413, 422, 503}},
	{Method: "GET", Path: "/v1/operations/{id}", Summary: "One operation of the caller's VMs", Auth: authUser, Params: []param{pOpID}, Status: 200, Answer: api.Operation{}, Errors: []int{404, 503}},
	{Method: "POST", Path: "/v1/tasks", Summary: "Submit a task: a command (argv) or a script run as its owner in a VM of its own of the profile, queued as POST /v1/vms queues a VM (hours: the time limit's ceiling), deleted the moment the command ends (docs/tasks.md). array makes an array of tasks (\"0-99%4\": at most 4 at once; each gets TASK_INDEX; at most 10000 elements), retries and retry_on run a failed attempt again in a new VM, signal (\"USR1@10m\") warns the command before its time limit", Auth: authUser, Body: api.CreateTaskRequest{}, Status: 202, Answer: api.Task{}, Errors: []int{400, 403, 404, 413, 422, 503}},
	{Method: "GET", Path: "/v1/tasks", Summary: "The caller's tasks, newest first (admins: everybody's, or owner's)", Auth: authUser, Params: []param{pOwner, pVMLimit}, Status: 200, Answer: api.TaskList{}, Errors: []int{400, 503}},
	{Method: "GET", Path: "/v1/tasks/{id}", Summary: "One task: its state (pending with its VM's queue reason and estimated start, booting, running, completing, completed, failed, timeout, cancelled, boot_fail, node_fail), exit code and signal; an array's counts of its elements by state (all of them) and a page of its elements by index (limit, after; elements_next the cursor of the next page), an element's ID being ID_INDEX; the attempts of a task that may retry", Auth: authUser, Params: []param{pTask, pElementsAfter, pElementsLimit}, Status: 200, Answer: api.Task{}, Errors: []int{400, 404, 503}},
	{Method: "GET", Path: "/v1/tasks/{id}/logs", Summary: "The task's output (stdout and stderr as one, up to 64 MiB) from offset; with follow=1 the answer goes on until the task has ended", Auth: authUser, Params: []param{pTask, pTaskOffset, pTaskFollow}, Status: 200, Answer: "", ContentType: "text/plain; charset=utf-8", Errors: []int{400, 404, 503}},
	{Method: "POST", Path: "/v1/tasks/{id}/cancel", Summary: "Cancel a task: a pending one's VM is deleted; a running one's command gets SIGTERM, then after kill_wait the VM is powered off and deleted; an array's cancel cancels every element that has not ended; no body", Auth: authUser, Params: []param{pTask}, Status: 202, Answer: api.Task{}, Errors: []int{400, 404, 409, 413, 503}},
	{Method: "GET", Path: "/v1/events", Summary: "Server-sent events of the VMs the caller may see (text/event-stream; each data line is an Event)", Auth: authUser, Params: []param{pEvVM, pOwner, pEvAfter, pLastID}, Status: 200, Answer: api.Event{}, ContentType: "text/event-stream", Errors: []int{404, 422, 503}},
	{Method: "GET", Path: "/v1/whoami", Summary: "Who the token belongs to, with where each of their groups comes from (local, ldap, oidc)", Auth: authUser, Status: 200, Answer: api.User{}},
	{Method: "POST", Path: "/v1/login", Summary: "Sign in with a directory account's name and password (server.auth.ldap): a bearer session that lasts server.auth.session_ttl after its last use (7 days at most); the user is made at the first sign-in and their groups refreshed from the directory. Every refusal is the same 401; limited per source address and per username (429)", Auth: authNone, Body: api.LoginRequest{}, Status: 200, Answer: api.LoginResponse{}, Errors: []int{400, 401, 404, 413, 422, 429, 503}},
	{Method: "GET", Path: "/v1/auth/methods", Summary: "The ways of signing in this server offers, for a sign-in page: password (a directory), oidc, tokens of local users", Auth: authNone, Status: 200, Answer: api.AuthMethods{}},
	{Method: "GET", Path: "/v1/auth/oidc/start", Summary: "Sign in with the OpenID provider (server.auth.oidc): a redirect to it, with PKCE, a nonce and a state. For the portal, return_to (default /); for a CLI without the device grant, a loopback redirect_uri with its own PKCE challenge and state", Auth: authNone, Params: []param{pReturnTo, pRedirect, pChallenge, pChMethod, pCLIState}, Status: 302, Errors: []int{404, 422, 429, 503}},
	{Method: "GET", Path: "/v1/auth/oidc/callback", Summary: "Where the provider sends the browser back: the code is exchanged and the ID token verified. A portal sign-in gets the session cookie (HttpOnly, SameSite=Strict, as POST /v1/session's) and a page that goes on to return_to (a same-site navigation, which sends the new cookie); a loopback sign-in a 303 to its redirect_uri with a one-time code and its state. No token is ever in a URL. Every refusal is the same 401", Auth: authNone, Params: []param{pOIDCState, pOIDCCode}, Status: 200, Answer: "", ContentType: "text/html; charset=utf-8", Errors: []int{401, 404, 429, 503}},
	{Method: "POST", Path: "/v1/auth/oidc/token", Summary: "Finish a loopback sign-in (gpuvm login --sso without the device grant): the one-time code (good once, for a minute) and the PKCE verifier of the start's code_challenge, for a bearer session as POST /v1/login answers. Every refusal is the same 401", Auth: authNone, Body: api.OIDCTokenRequest{}, Status: 200, Answer: api.LoginResponse{}, Errors: []int{400, 401, 404, 413, 422, 429}},
	{Method: "POST", Path: "/v1/auth/oidc/device", Summary: "Start a device sign-in with the OpenID provider (gpuvm login --sso): gpuvmd asks it for a code to type at a URL on any device; no body", Auth: authNone, Status: 200, Answer: api.DeviceLoginResponse{}, Errors: []int{400, 404, 413, 429, 503}},
	{Method: "POST", Path: "/v1/auth/oidc/device/poll", Summary: "Collect a device sign-in: waits up to 20s, then 202 while the person has not finished at the provider, or a session token as POST /v1/login answers; every refusal is the same 401", Auth: authNone, Body: api.DevicePollRequest{}, Status: 200, Answer: api.LoginResponse{}, Errors: []int{400, 401, 404, 413, 422}},
	{Method: "POST", Path: "/v1/logout", Summary: "End the session of the request: a sign-in's bearer session, or the portal's cookie (with its X-CSRF-Token; the cookie is cleared); an API token is refused (revoke it instead); no body", Auth: authUser, Status: 204, Errors: []int{400, 403, 413, 422}},
	{Method: "GET", Path: "/v1/users", Summary: "Every user", Auth: authAdmin, Status: 200, Answer: api.UserList{}},
	{Method: "POST", Path: "/v1/users", Summary: "Add a user", Auth: authAdmin, Body: api.CreateUserRequest{}, Status: 201, Answer: api.User{}, Errors: []int{400, 409, 413, 422}},
	{Method: "GET", Path: "/v1/users/{name}", Summary: "One user (admins, or the user)", Auth: authUser, Params: []param{pUser}, Status: 200, Answer: api.User{}, Errors: p404},
	{Method: "GET", Path: "/v1/users/{name}/tokens", Summary: "A user's API tokens, never their secrets (admins, or the user)", Auth: authUser, Params: []param{pUser}, Status: 200, Answer: api.TokenList{}, Errors: p404},
	{Method: "POST", Path: "/v1/users/{name}/tokens", Summary: "Make an API token; the answer shows it once (admins, or the user)", Auth: authUser, Params: []param{pUser}, Body: api.CreateTokenRequest{}, Status: 201, Answer: api.CreatedToken{}, Errors: []int{400, 404, 409, 413, 422}},
	{Method: "GET", Path: "/v1/users/{name}/ssh-keys", Summary: "The SSH public keys a user keeps for new VMs (admins, or the user)", Auth: authUser, Params: []param{pUser}, Status: 200, Answer: api.SSHKeys{}, Errors: p404},
	{Method: "PUT", Path: "/v1/users/{name}/ssh-keys", Summary: "Replace the SSH public keys a user keeps for new VMs; an empty list forgets them (admins, or the user)", Auth: authUser, Params: []param{pUser}, Body: api.SSHKeys{}, Status: 200, Answer: api.SSHKeys{}, Errors: []int{400, 404, 413, 422}},
	{Method: "DELETE", Path: "/v1/users/{name}/tokens/{id}", Summary: "Revoke an API token (admins, or the user)", Auth: authUser, Params: []param{pUser, pTokenID}, Status: 204, Errors: p404},
	{Method: "GET", Path: "/v1/hosts", Summary: "Every host (gpuvmd) with its health and free capacity; for admins also every GPU with the devices on it and the VM, owner and profile holding each (gpu_detail)", Auth: authUser, Status: 200, Answer: api.HostList{}},
	{Method: "POST", Path: "/v1/admin/gpus/{addr}/drain", Summary: "Drain a GPU: it takes no new VMs, what it holds keeps running", Auth: authAdmin, Params: []param{pGPU}, Body: api.DrainRequest{}, Status: 200, Answer: api.GPUDrainState{}, Errors: []int{400, 404, 413, 422, 503}},
	{Method: "DELETE", Path: "/v1/admin/gpus/{addr}/drain", Summary: "Undrain a GPU", Auth: authAdmin, Params: []param{pGPU}, Status: 200, Answer: api.GPUDrainState{}, Errors: p404},
	{Method: "POST", Path: "/v1/admin/driver-changes", Summary: "Announce a change of the hosts' NVIDIA vGPU manager: the owners of VMs with a vGPU are told, a snapshot offered", Auth: authAdmin, Body: api.DriverChangeRequest{}, Status: 201, Answer: api.DriverChange{}, Errors: []int{400, 413, 422}},
	{Method: "GET", Path: "/v1/admin/driver-changes", Summary: "The announced driver changes, the next first", Auth: authAdmin, Status: 200, Answer: api.DriverChangeList{}},
	{Method: "DELETE", Path: "/v1/admin/driver-changes/{id}", Summary: "Withdraw an announced driver change: nobody else is told", Auth: authAdmin, Params: []param{pDriverChange}, Status: 200, Answer: api.DriverChange{}, Errors: p404},
	{Method: "GET", Path: "/v1/gpus", Summary: "The host's GPUs and devices, with drained state", Auth: authAdmin, Status: 200, Answer: api.HostInventory{}},
	{Method: "POST", Path: "/v1/admin/reload", Summary: "Reload the configuration files, all or nothing; no body. A refusal (422, invalid-configuration) lists every diagnostic with its file, line and column in config_diagnostics", Auth: authAdmin, Status: 200, Answer: api.ReloadResult{}, Errors: []int{400, 413, 422, 503}},
	{Method: "GET", Path: "/metrics", Summary: "Prometheus metrics (text format; docs/metrics.md); open to all unless server.monitor.metrics_auth = \"token\", which wants any valid API token", Auth: authNone, Status: 200, Answer: "", ContentType: "text/plain; version=0.0.4", Errors: []int{401, 503}},
	{Method: "GET", Path: "/v1/alerts", Summary: "Alerts of the policy's alert rules, newest first, by pages", Auth: authAdmin, Params: []param{pAlertState, pAlertRule, pAfter, pLimit}, Status: 200, Answer: api.AlertList{}, Errors: []int{400, 503}},
	{Method: "GET", Path: "/v1/usage", Summary: "GPU-hours held in a range, weighted by the share of each GPU, with the utilisation achieved, grouped (users: their own; admins: everyone's)", Auth: authUser, Params: []param{pFrom, pTo, pUsageBy, pUsageUser}, Status: 200, Answer: api.UsageReport{}, Errors: []int{403, 422, 503}},
	{Method: "GET", Path: "/v1/usage/periods", Summary: "A user's GPU-hours this day, week (from Monday) and month of the policy's time zone against their GPU-hour quotas, with the utilisation achieved and the idle time, and day by day (users: their own; admins: anyone's)", Auth: authUser, Params: []param{pPeriodsUser}, Status: 200, Answer: api.UsagePeriods{}, Errors: []int{403, 404, 503}},
	{Method: "GET", Path: "/v1/reports/summary", Summary: "Everything the periodic review report shows: usage, idle VMs, queue waits, weekday × hour heatmaps, notes", Auth: authAdmin, Params: []param{pFrom, pTo, pTZ, pIdleBelow}, Status: 200, Answer: api.ReportSummary{}, Errors: []int{422, 503}},
	{Method: "GET", Path: "/v1/reports/summary.html", Summary: "The periodic review report as the self-contained HTML page gpuvm report writes (inline styles and SVG charts, no script), for a browser", Auth: authAdmin, Params: []param{pFrom, pTo, pTZ, pIdleBelow}, Status: 200, Answer: "", ContentType: "text/html; charset=utf-8", Errors: []int{422, 503}},
	// audit.go
	{Method: "GET", Path: "/v1/admin/audit", Summary: "The audit log: every state-changing request and every console or tunnel ticket issued and connection opened, newest first, by pages; no route changes it",
		Auth: authAdmin, Params: []param{pAuditUser, pAuditVM, pAuditAction, pAuditFrom, pAuditTo, pLimit, pAfter}, Status: 200, Answer: api.AuditList{}, Errors: []int{400, 503}},
	{Method: "GET", Path: "/v1/audit", Summary: "The caller's own entries of the audit log, newest first, by pages",
		Auth: authUser, Params: []param{pAuditOwnUser, pAuditVM, pAuditAction, pAuditFrom, pAuditTo, pLimit, pAfter}, Status: 200, Answer: api.AuditList{}, Errors: []int{400, 403, 503}},
	// reservations.go
	{Method: "POST", Path: "/v1/reservations", Summary: "Book GPU capacity ahead for the caller (admins: for a user or a group), once or weekly/daily; refused with 409 when the GPUs cannot honour it then", Auth: authUser, Body: api.CreateReservationRequest{}, Status: 201, Answer: api.Reservation{}, Errors: []int{400, 403, 404, 409, 413, 422, 503}},
	{Method: "GET", Path: "/v1/reservations", Summary: "The reservations not over (or in a range) that the caller may see: their own, their groups', those they made (admins: all), by start", Auth: authUser, Params: []param{pResFrom, pResTo, pResOwner}, Status: 200, Answer: api.ReservationList{}, Errors: []int{403, 422, 503}},
	{Method: "GET", Path: "/v1/reservations/capacity", Summary: "For a calendar to book from: per slot, how many VMs of a profile a booking could get (the GPUs less the reservations made and the VMs whose leases run into it), and the caller's booking rules", Auth: authUser, Params: []param{pCapProf, pCapFrom, pCapTo, pCapStep}, Status: 200, Answer: api.ReservationCapacity{}, Errors: []int{404, 422, 503}},
	{Method: "GET", Path: "/v1/reservations/{id}", Summary: "One reservation the caller may see, with its next occurrences", Auth: authUser, Params: []param{pResID}, Status: 200, Answer: api.Reservation{}, Errors: []int{404, 503}},
	{Method: "DELETE", Path: "/v1/reservations/{id}", Summary: "Cancel a reservation (its owner, who booked it, or an admin)", Auth: authUser, Params: []param{pResID}, Status: 204, Errors: []int{403, 404, 503}},
}

// securitySchemes: a bearer token, or the web portal's session cookie
// (portal.go).
var securitySchemes = map[string]any{
	"bearer": map[string]any{"type": "http", "scheme": "bearer"},
	"session": map[string]any{"type": "apiKey", "in": "cookie", "name": api.SessionCookie,
		"description": "The web portal's session (POST /v1/session); a state-changing request with it also needs the session's CSRF token in " + api.CSRFHeader + "."},
}

// openAPI builds the OpenAPI 3.1 document of routes.
func openAPI(routes []route) map[string]any {
	g := &schemaGen{defs: map[string]any{}}
	paths := map[string]any{}
	for _, r := range routes {
		op := map[string]any{"summary": r.Summary, "operationId": operationID(r)}
		tag := strings.Split(strings.TrimPrefix(strings.TrimPrefix(r.Path, "/v1"), "/"), "/")[0]
		op["tags"] = []string{tag}
		switch r.Auth {
		case authNone, authTicket:
			op["security"] = []any{}
		default:
			// A bearer token, or the web portal's session cookie (portal.go).
			op["security"] = []any{map[string]any{"bearer": []string{}}, map[string]any{"session": []string{}}}
		}
		if r.Auth == authAdmin {
			op["description"] = "Admins only."
		}
		var params []any
		for _, p := range r.Params {
			params = append(params, map[string]any{"name": p.Name, "in": p.In, "description": p.Description,
				"required": p.In == "path", "schema": map[string]any{"type": p.Type}})
		}
		if r.Auth == authTicket {
			params = append(params, map[string]any{"name": "ticket", "in": "query", "required": true,
				"description": "a one-time ticket", "schema": map[string]any{"type": "string"}})
		}
		if params != nil {
			op["parameters"] = params
		}
		if r.Body != nil {
			op["requestBody"] = map[string]any{"required": true, "content": map[string]any{
				"application/json": map[string]any{"schema": g.schema(reflect.TypeOf(r.Body))}}}
		}
		resps := map[string]any{}
		ok := map[string]any{"description": http.StatusText(r.Status)}
		if r.Answer != nil {
			ct := r.ContentType
			if ct == "" {
				ct = "application/json"
			}
			ok["content"] = map[string]any{ct: map[string]any{"schema": g.schema(reflect.TypeOf(r.Answer))}}
		}
		resps[strconv.Itoa(r.Status)] = ok
		// Every route refuses a query that does not parse (decode.go's
		// checkQuery).
		errs := append([]int{http.StatusBadRequest}, r.Errors...)
		if r.Method == http.MethodPost {
			// Every POST reads its body (decode.go): one that does not
			// come within the body timeout is answered 408 (limits.go).
			errs = append(errs, http.StatusRequestTimeout)
		}
		switch r.Auth {
		case authUser:
			errs = append(errs, 401)
		case authAdmin:
			errs = append(errs, 401, 403)
		case authTicket:
			errs = append(errs, 401, 403)
		}
		for _, code := range errs {
			resps[strconv.Itoa(code)] = map[string]any{"$ref": "#/components/responses/problem"}
		}
		op["responses"] = resps
		item, _ := paths[r.Path].(map[string]any)
		if item == nil {
			item = map[string]any{}
			paths[r.Path] = item
		}
		item[strings.ToLower(r.Method)] = op
	}
	g.defs["Problem"] = g.structSchema(reflect.TypeOf(api.Problem{}))
	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "gpuvm", "version": "v1",
			"description": "GPU virtual machines on shared GPU servers. Errors are RFC 9457 problem+json; every problem type is " + api.ProblemBase + "<kind>."},
		"paths": paths,
		"components": map[string]any{
			"schemas":         g.defs,
			"securitySchemes": securitySchemes,
			"responses": map[string]any{"problem": map[string]any{"description": "RFC 9457 problem details",
				"content": map[string]any{"application/problem+json": map[string]any{"schema": map[string]any{"$ref": "#/components/schemas/Problem"}}}}},
		},
	}
}

func operationID(r route) string {
	var b strings.Builder
	b.WriteString(strings.ToLower(r.Method))
	for _, part := range strings.Split(r.Path, "/") {
		part = strings.Trim(part, "{}")
		for _, w := range strings.FieldsFunc(part, func(c rune) bool { return c == '.' || c == '-' || c == '_' }) {
			b.WriteString(strings.ToUpper(w[:1]) + w[1:])
		}
	}
	return b.String()
}

// schemaGen makes JSON Schemas of Go types: named structs become
// components, referenced by name.
type schemaGen struct{ defs map[string]any }

var (
	timeType = reflect.TypeOf(time.Time{})
	rawType  = reflect.TypeOf(json.RawMessage(nil))
)

func (g *schemaGen) schema(t reflect.Type) map[string]any {
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t == rawType:
		return map[string]any{"description": "any JSON value"}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return g.schema(t.Elem())
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice, reflect.Array:
		return map[string]any{"type": "array", "items": g.schema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": g.schema(t.Elem())}
	case reflect.Interface:
		return map[string]any{}
	case reflect.Struct:
		if t.Name() == "" {
			return g.structSchema(t)
		}
		if _, ok := g.defs[t.Name()]; !ok {
			g.defs[t.Name()] = nil // a placeholder stops recursion
			g.defs[t.Name()] = g.structSchema(t)
		}
		return map[string]any{"$ref": "#/components/schemas/" + t.Name()}
	}
	return map[string]any{}
}

func (g *schemaGen) structSchema(t reflect.Type) map[string]any {
	props := map[string]any{}
	var required []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			embedded := g.structSchema(f.Type)
			for k, v := range embedded["properties"].(map[string]any) {
				props[k] = v
			}
			if r, ok := embedded["required"].([]string); ok {
				required = append(required, r...)
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		props[name] = g.schema(f.Type)
		if !strings.Contains(opts, "omitempty") && !strings.Contains(opts, "omitzero") && f.Type.Kind() != reflect.Pointer {
			required = append(required, name)
		}
	}
	out := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		sort.Strings(required)
		out["required"] = required
	}
	return out
}

// openAPIJSON is the document, built once.
var openAPIJSON = sync.OnceValues(func() ([]byte, error) {
	b, err := json.MarshalIndent(openAPI(apiRoutes), "", "  ")
	return append(b, '\n'), err
})

func (s *Server) openAPI(c *gin.Context) {
	doc, err := openAPIJSON()
	if err != nil {
		s.writeProblem(c, fmt.Errorf("build the OpenAPI document: %w", err))
		return
	}
	c.Data(http.StatusOK, "application/json", doc)
}
