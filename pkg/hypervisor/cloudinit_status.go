package hypervisor

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"libvirt.org/go/libvirt"
)

// CloudInitResultPath is where cloud-init writes its result once its last
// stage has run: {"v1": {"datasource": …, "errors": […]}}.
const CloudInitResultPath = "/var/lib/cloud/data/result.json"

// cloudInitResultMax bounds what is read of the result: it is a few hundred
// bytes; a guest that offers more is not believed.
const cloudInitResultMax = 64 << 10

// cloudInitAgentWait is how long one agent command may wait for the agent,
// in seconds: a guest whose agent is not up yet must not hold up the watch
// of the others.
const cloudInitAgentWait libvirt.DomainQemuAgentCommandTimeout = 2

// ErrNoAgent says that a guest's QEMU guest agent cannot be asked: none is
// configured, it does not run (yet), or it does not answer.
var ErrNoAgent = errors.New("the guest agent does not answer")

// CloudInitStatus is what cloud-init reported in a guest.
type CloudInitStatus struct {
	// Done: cloud-init has run its last stage (its result is written).
	Done bool
	// Errors are the errors of its stages, as it wrote them; none when it
	// succeeded.
	Errors []string
}

// CloudInitStatus reads, through the QEMU guest agent, whether cloud-init
// has finished in the guest of the running domain with uuid and with what
// errors. Not finished is a zero status and no error; a guest whose agent
// cannot be asked is ErrNoAgent; a missing domain IsNotFound.
func (c *Conn) CloudInitStatus(ctx context.Context, uuid string) (CloudInitStatus, error) {
	h, err := c.lookup(ctx, uuid, "cloud-init status")
	if err != nil {
		return CloudInitStatus{}, err
	}
	defer h.Free()
	agent := func(cmd map[string]any, ret any) error {
		b, err := json.Marshal(cmd)
		if err != nil {
			return err
		}
		out, err := call(ctx, c, "guest agent "+fmt.Sprint(cmd["execute"]), min(agentTimeout, c.callTimeout), func() (string, error) {
			return h.d.QemuAgentCommand(string(b), cloudInitAgentWait, 0)
		}, nil)
		switch {
		case agentUnavailable(err):
			return fmt.Errorf("%w: %v", ErrNoAgent, clean(err))
		case err != nil:
			return vmError(h.name, "cloud-init status", err)
		}
		var answer struct {
			Return json.RawMessage `json:"return"`
		}
		if err := json.Unmarshal([]byte(out), &answer); err != nil {
			return fmt.Errorf("guest agent answer to %s: %w", cmd["execute"], err)
		}
		return json.Unmarshal(answer.Return, ret)
	}
	var fd int64
	err = agent(map[string]any{"execute": "guest-file-open", "arguments": map[string]any{"path": CloudInitResultPath, "mode": "r"}}, &fd)
	switch {
	case errors.Is(err, ErrNoAgent), IsNotFound(err):
		return CloudInitStatus{}, err
	case err != nil:
		// The agent answered that the file cannot be opened: cloud-init
		// has not written it yet.
		return CloudInitStatus{}, nil
	}
	defer func() {
		_ = agent(map[string]any{"execute": "guest-file-close", "arguments": map[string]any{"handle": fd}}, &struct{}{})
	}()
	var data []byte
	for len(data) <= cloudInitResultMax {
		var chunk struct {
			Count int    `json:"count"`
			Buf   string `json:"buf-b64"`
			EOF   bool   `json:"eof"`
		}
		if err := agent(map[string]any{"execute": "guest-file-read", "arguments": map[string]any{"handle": fd, "count": 16 << 10}}, &chunk); err != nil {
			return CloudInitStatus{}, err
		}
		b, err := base64.StdEncoding.DecodeString(chunk.Buf)
		if err != nil {
			return CloudInitStatus{}, fmt.Errorf("read %s in the guest: %w", CloudInitResultPath, err)
		}
		data = append(data, b...)
		if chunk.EOF || chunk.Count == 0 {
			return ParseCloudInitResult(data)
		}
	}
	return CloudInitStatus{}, fmt.Errorf("%s in the guest is over %d bytes: not cloud-init's result", CloudInitResultPath, cloudInitResultMax)
}

// ParseCloudInitResult reads cloud-init's result.json.
func ParseCloudInitResult(data []byte) (CloudInitStatus, error) {
	var r struct {
		V1 *struct {
			Errors []any `json:"errors"`
		} `json:"v1"`
	}
	if err := json.Unmarshal(data, &r); err != nil || r.V1 == nil {
		return CloudInitStatus{}, fmt.Errorf("%s in the guest is not cloud-init's result (%.80q)", CloudInitResultPath, strings.TrimSpace(string(data)))
	}
	st := CloudInitStatus{Done: true}
	for _, e := range r.V1.Errors {
		s, ok := e.(string)
		if !ok {
			b, _ := json.Marshal(e)
			s = string(b)
		}
		st.Errors = append(st.Errors, s)
	}
	return st, nil
}
