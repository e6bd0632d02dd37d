package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"sync"

	"github.com/gin-gonic/gin"
)

// Large answers (a page of 1,000 VMs, hundreds of kilobytes) are encoded
// into a buffer kept between requests, not into a new one as gin's c.JSON
// does (json.Marshal also copies its whole output once more): garbage that
// every node's collector would sweep while other requests wait (issue #26).
var jsonBuffers = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// maxKeptJSONBuffer: a buffer grown past this by a rare huge answer is
// dropped rather than kept.
const maxKeptJSONBuffer = 8 << 20

// writeJSON answers status with v in JSON, as c.JSON does (HTML characters
// escaped, the same Content-Type), with its Content-Length; a value that
// cannot be encoded is an internal error's problem, logged, as any other.
func (s *Server) writeJSON(c *gin.Context, status int, v any) {
	buf := jsonBuffers.Get().(*bytes.Buffer)
	buf.Reset()
	defer func() {
		if buf.Cap() <= maxKeptJSONBuffer {
			jsonBuffers.Put(buf)
		}
	}()
	if err := json.NewEncoder(buf).Encode(v); err != nil {
		s.writeProblem(c, fmt.Errorf("encode the answer: %w", err))
		return
	}
	buf.Truncate(buf.Len() - 1) // Encode's newline: the bytes c.JSON would write
	h := c.Writer.Header()
	h.Set("Content-Type", "application/json; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	c.Status(status)
	_, _ = c.Writer.Write(buf.Bytes())
}
