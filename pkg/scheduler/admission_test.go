package scheduler

import "testing"

func TestReasonText(t *testing.T) {
	tests := []struct {
		r    Reason
		want string
	}{
		{Reason{}, ""},
		{Reason{Code: CodeNoCapacity}, "no_capacity"},
		{Reason{Code: CodeQuota, Detail: "user ann: may run 0 VMs at once"}, "quota: user ann: may run 0 VMs at once"},
		{Reason{Code: CodeWindow, Detail: "outside the window nights"}, "outside the window nights"},
	}
	for _, tc := range tests {
		if got := tc.r.Text(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.r, got, tc.want)
		}
	}
}
