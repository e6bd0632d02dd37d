// Package client is a Go client of gpuvmd's REST API (/v1). It is pure Go
// and depends only on the standard library and pkg/api, so the CLI and any
// other program can use it.
//
// Every call takes a context. An error answer is a *Problem (RFC 9457
// problem+json), which errors.Is matches against ErrNotFound,
// ErrUnauthenticated and the other sentinels (or use IsNotFound and the
// like); a request that got no answer is a *TransportError that names the
// URL.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// Client talks to one gpuvmd with one token. Its fields may be changed
// before the first call; it is safe for concurrent use afterwards.
type Client struct {
	base  *url.URL
	token string
	// HTTP sends the requests (default: a client with a 60s timeout).
	HTTP *http.Client
	// UserAgent is sent with every request (default "gpuvm-client").
	UserAgent string
	// PollMin and PollMax bound the interval of WaitVM and WaitOperation:
	// it starts at PollMin and grows by half each poll up to PollMax
	// (defaults 500ms and 5s).
	PollMin, PollMax time.Duration
}

// New returns a client of the server at baseURL ("https://gpu.example:8443",
// with or without a path prefix) that sends token as its bearer token.
func New(baseURL, token string) (*Client, error) {
	u, err := ParseURL(baseURL)
	if err != nil {
		return nil, err
	}
	return &Client{base: u, token: token, HTTP: &http.Client{Timeout: time.Minute}, UserAgent: "gpuvm-client",
		PollMin: 500 * time.Millisecond, PollMax: 5 * time.Second}, nil
}

// ParseURL checks a server URL: http or https, a host, no query. A URL
// without a scheme is taken as https.
func ParseURL(s string) (*url.URL, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errors.New("no server URL")
	}
	if !strings.Contains(s, "://") {
		s = "https://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("server URL %q: %w", s, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("server URL %q: the scheme must be http or https", s)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("server URL %q has no host", s)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("server URL %q: no query or fragment, please", s)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	u.RawPath = ""
	return u, nil
}

// URL is the server's base URL.
func (c *Client) URL() string { return c.base.String() }

// Profile is a profile as GET /v1/profiles shows it: the fields a client
// needs, with sizes in bytes and durations in seconds. Raw keeps the whole
// JSON object the server sent, and is what Profile marshals to.
type Profile struct {
	Name        string       `json:"name"`
	Description string       `json:"description,omitempty"`
	VCPUs       int          `json:"vcpus"`
	Memory      uint64       `json:"memory"`
	Disk        *ProfileDisk `json:"disk,omitempty"`
	GPU         *ProfileGPU  `json:"gpu,omitempty"`
	Lease       struct {
		Default  int64 `json:"default"`   // seconds
		Max      int64 `json:"max"`       // seconds
		IdleStop int64 `json:"idle_stop"` // seconds; 0: never
	} `json:"lease"`
	Class    string `json:"class"`
	Priority int    `json:"priority"`
	OS       string `json:"os"`
	// Unservable says why no GPU of the server's hosts can ever give
	// the profile (api.Profile); "" when one can, or nothing is known.
	Unservable string `json:"unservable,omitempty"`
	// Unavailable says why a VM of the profile cannot be made on this
	// server now: what it is made of (its disk image, kernel, template)
	// is missing (api.Profile); "" when it can.
	Unavailable string `json:"unavailable,omitempty"`
	// Free is how many VMs of the profile the hosts could place now, and
	// of how many (api.Profile); nil when the server does not count them.
	Free *api.ProfileFree `json:"free,omitempty"`

	Raw json.RawMessage `json:"-"`
}

// ProfileDisk is a profile's system disk.
type ProfileDisk struct {
	Image string `json:"image"`
	Size  uint64 `json:"size,omitempty"`
}

// ProfileGPU is what GPU a profile asks for.
type ProfileGPU struct {
	Kind    string   `json:"kind"` // vgpu, mig, passthrough or any
	Type    string   `json:"type,omitempty"`
	Profile string   `json:"profile,omitempty"`
	Model   string   `json:"model,omitempty"`
	Count   int      `json:"count"`
	Memory  uint64   `json:"memory"`
	Kinds   []string `json:"kinds,omitempty"`
	Series  string   `json:"series,omitempty"`
}

// UnmarshalJSON decodes the known fields and keeps the whole object in Raw.
func (p *Profile) UnmarshalJSON(b []byte) error {
	type plain Profile
	var q plain
	if err := json.Unmarshal(b, &q); err != nil {
		return err
	}
	*p = Profile(q)
	p.Raw = append(json.RawMessage(nil), b...)
	return nil
}

// MarshalJSON writes Raw when there is one: what the server sent.
func (p Profile) MarshalJSON() ([]byte, error) {
	if len(p.Raw) > 0 {
		return p.Raw, nil
	}
	type plain Profile
	return json.Marshal(plain(p))
}

// ReloadResult is the answer to POST /v1/admin/reload.
type ReloadResult struct {
	// Config summarises what is in force: "DIR: N files, M profiles".
	Config string `json:"config"`
	// Diagnostics are the warnings of the new configuration, rendered.
	Diagnostics string `json:"diagnostics,omitempty"`
}

// ListVMsOptions filter GET /v1/vms.
type ListVMsOptions struct {
	// States keeps VMs in these states only (empty: all).
	States []string
	// Limit is the page size (1..1000; 0: the server's default).
	Limit int
	// After is the cursor of a page (VMList.Next of the previous one).
	After string
}

// ListProfiles lists the profiles the caller may use (admins: all).
func (c *Client) ListProfiles(ctx context.Context) ([]Profile, error) {
	var out []Profile
	err := c.do(ctx, http.MethodGet, "/v1/profiles", nil, nil, nil, &out)
	return out, err
}

// GetProfile gets one profile; one the caller may not use is not found.
func (c *Client) GetProfile(ctx context.Context, name string) (*Profile, error) {
	var out Profile
	if err := c.do(ctx, http.MethodGet, "/v1/profiles/"+url.PathEscape(name), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CreateVM asks for a VM. The answer comes at once (202): the VM is queued
// and an operation creates it; WaitVM follows it. idempotencyKey, when not
// empty, makes a retry of the same request return the first answer instead
// of a second VM.
func (c *Client) CreateVM(ctx context.Context, req api.CreateVMRequest, idempotencyKey string) (*api.CreateVMResponse, error) {
	var hdr http.Header
	if idempotencyKey != "" {
		hdr = http.Header{"Idempotency-Key": {idempotencyKey}}
	}
	var out api.CreateVMResponse
	if err := c.do(ctx, http.MethodPost, "/v1/vms", nil, hdr, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListVMs gets one page of the caller's VMs (admins: everyone's), oldest
// first.
func (c *Client) ListVMs(ctx context.Context, o ListVMsOptions) (*api.VMList, error) {
	q := url.Values{}
	if len(o.States) > 0 {
		q.Set("state", strings.Join(o.States, ","))
	}
	if o.Limit > 0 {
		q.Set("limit", fmt.Sprint(o.Limit))
	}
	if o.After != "" {
		q.Set("after", o.After)
	}
	var out api.VMList
	if err := c.do(ctx, http.MethodGet, "/v1/vms", q, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListAllVMs follows the pages of ListVMs to the end (o.After is where it
// starts).
func (c *Client) ListAllVMs(ctx context.Context, o ListVMsOptions) ([]api.VM, error) {
	out := []api.VM{}
	for {
		page, err := c.ListVMs(ctx, o)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Items...)
		if page.Next == "" || page.Next == o.After {
			return out, nil
		}
		o.After = page.Next
	}
}

// GetVM gets a VM by ID, or by name among the caller's live VMs.
func (c *Client) GetVM(ctx context.Context, idOrName string) (*api.VM, error) {
	var out api.VM
	if err := c.do(ctx, http.MethodGet, "/v1/vms/"+url.PathEscape(idOrName), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteVM asks for a VM's deletion (by ID or name) and returns the delete
// operation; asking again while it runs returns the same operation.
func (c *Client) DeleteVM(ctx context.Context, idOrName string) (*api.Operation, error) {
	var out api.OperationResponse
	if err := c.do(ctx, http.MethodDelete, "/v1/vms/"+url.PathEscape(idOrName), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out.Operation, nil
}

// GetOperation gets an operation.
func (c *Client) GetOperation(ctx context.Context, id string) (*api.Operation, error) {
	var out api.Operation
	if err := c.do(ctx, http.MethodGet, "/v1/operations/"+url.PathEscape(id), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GPUs gets the host inventory (admins only).
func (c *Client) GPUs(ctx context.Context) (*api.HostInventory, error) {
	var out api.HostInventory
	if err := c.do(ctx, http.MethodGet, "/v1/gpus", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Reload has gpuvmd re-read its configuration, all or nothing (admins
// only). A configuration with errors is a *Problem of kind
// invalid-configuration whose Diagnostics say what is wrong; nothing was
// changed then.
func (c *Client) Reload(ctx context.Context) (*ReloadResult, error) {
	var out ReloadResult
	if err := c.do(ctx, http.MethodPost, "/v1/admin/reload", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// maxAnswerBytes bounds what is read of an answer.
const maxAnswerBytes = 64 << 20

// do sends one request and decodes a 2xx answer into out (when not nil),
// anything else into a *Problem.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, hdr http.Header, body, out any) error {
	// path is escaped already (url.PathEscape of its parts).
	target := c.base.String() + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	var rd io.Reader
	raw, isRaw := body.(rawBody) // bytes sent as they are (images.go)
	if isRaw {
		rd = bytes.NewReader(raw)
	} else if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%s %s: encode the request: %w", method, target, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, target, err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	if isRaw {
		req.Header.Set("Content-Type", "application/octet-stream")
	} else if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.UserAgent != "" {
		req.Header.Set("User-Agent", c.UserAgent)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		// *url.Error repeats the method and URL; keep its cause.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if ctxErr := ctx.Err(); ctxErr != nil && errors.Is(err, ctxErr) {
			return fmt.Errorf("%s %s: %w", method, target, ctxErr)
		}
		return &TransportError{Method: method, URL: target, Err: err}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return &TransportError{Method: method, URL: target, Err: fmt.Errorf("read the answer: %w", err)}
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return problemOf(resp, data, method, target)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return &TransportError{Method: method, URL: target,
			Err: fmt.Errorf("the answer (%s, %s) is not the JSON expected: %w", resp.Status, contentType(resp), err)}
	}
	return nil
}

func contentType(resp *http.Response) string {
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if ct == "" {
		return "no content type"
	}
	return ct
}

func problemOf(resp *http.Response, data []byte, method, target string) *Problem {
	p := &Problem{}
	ct := contentType(resp)
	if ct == "application/problem+json" || ct == "application/json" {
		if err := json.Unmarshal(data, p); err != nil || p.Title == "" && p.Type == "" && p.Detail == "" {
			p = &Problem{}
		}
	}
	if p.Type == "" {
		p.Type = "about:blank"
	}
	if p.Status == 0 || p.Status != resp.StatusCode {
		p.Status = resp.StatusCode
	}
	if p.Title == "" {
		p.Title = http.StatusText(resp.StatusCode)
		if p.Title == "" {
			p.Title = resp.Status
		}
	}
	if p.Detail == "" && p.Type == "about:blank" {
		text := strings.TrimSpace(string(data))
		if len(text) > 200 {
			text = text[:200] + "…"
		}
		if text != "" {
			p.Detail = fmt.Sprintf("%s answered (%s): %s", target, ct, text)
		}
	}
	p.Method, p.URL = method, target
	return p
}
