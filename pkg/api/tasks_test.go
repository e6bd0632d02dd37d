package api

import "testing"

func TestTaskCounts(t *testing.T) {
	for _, tc := range []struct {
		n    map[string]int
		want string
	}{
		{nil, ""},
		{map[string]int{TaskCompleted: 4, TaskFailed: 2}, "4 completed, 2 failed"},
		{map[string]int{TaskRunning: 2, TaskPending: 4, TaskNodeFail: 1, TaskBooting: 0}, "4 pending, 2 running, 1 node_fail"},
		{map[string]int{"unknown": 3, TaskCancelled: 1}, "1 cancelled"},
	} {
		if got := TaskCounts(tc.n); got != tc.want {
			t.Errorf("TaskCounts(%v) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
