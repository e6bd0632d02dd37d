package hypervisor

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// The test driver runs no guest agent: a running domain's cloud-init
// status cannot be read (ErrNoAgent), a missing domain is not found.
func TestCloudInitStatusWithoutAgent(t *testing.T) {
	c := openTest(t)
	ctx := testCtx(t)
	s := gpuSpec(t, kindNone)
	if _, err := c.Define(ctx, s); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.ForceOff(context.Background(), s.UUID); _ = c.Undefine(context.Background(), s.UUID) })
	if err := c.Start(ctx, s.UUID); err != nil {
		t.Fatal(err)
	}
	if st, err := c.CloudInitStatus(ctx, s.UUID); !errors.Is(err, ErrNoAgent) || st.Done {
		t.Errorf("no agent: %+v, %v; want ErrNoAgent", st, err)
	}
	if _, err := c.CloudInitStatus(ctx, randomUUID()); !IsNotFound(err) {
		t.Errorf("missing domain: %v", err)
	}
}

func TestParseCloudInitResult(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     CloudInitStatus
		err      string
	}{
		{"success", `{"v1": {"datasource": "DataSourceNoCloud [seed=/dev/sr0]", "errors": []}}`, CloudInitStatus{Done: true}, ""},
		{"errors", `{"v1": {"datasource": "DataSourceNoCloud", "errors": ["('users_groups', KeyError('x'))", {"module": "runcmd"}]}}`,
			CloudInitStatus{Done: true, Errors: []string{"('users_groups', KeyError('x'))", `{"module":"runcmd"}`}}, ""},
		{"no v1", `{"v2": {}}`, CloudInitStatus{}, "is not cloud-init's result"},
		{"not JSON", "garbage\n", CloudInitStatus{}, `"garbage"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseCloudInitResult([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one with %q", err, tc.err)
				}
				return
			}
			if err != nil || got.Done != tc.want.Done || strings.Join(got.Errors, "|") != strings.Join(tc.want.Errors, "|") {
				t.Errorf("%+v, %v; want %+v", got, err, tc.want)
			}
		})
	}
}
