package logtest

import (
	"strings"
	"sync"
	"testing"
)

func TestConcurrentWrites(t *testing.T) {
	log, buf := New()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { log.Debug("written", "by", i) })
	}
	wg.Wait()
	if n := strings.Count(buf.String(), "msg=written"); n != 8 {
		t.Errorf("%d lines, want 8:\n%s", n, buf.String())
	}
}
