package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// EventsOptions selects the events of a stream.
type EventsOptions struct {
	// VM is a VM's ID or name: only its events. Empty: every VM the caller
	// may see.
	VM string
	// Owner (admins only) keeps the events of one user's VMs.
	Owner string
	// After resumes after an event ID. 0 starts with what happens next,
	// unless FromStart is set.
	After int64
	// FromStart replays every event the server still keeps (after ID 0)
	// before what happens next.
	FromStart bool
}

// EventStream is an open GET /v1/events stream. A stream that breaks is
// reopened after the last event it delivered (Last-Event-ID), so nothing is
// missed; it gives up after several failures in a row.
type EventStream struct {
	c      *Client
	o      EventsOptions
	events chan api.Event
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	err  error // why the stream ended
	last int64
}

// maxLine bounds one line of the stream.
const maxLine = 1 << 20

// Events opens the event stream. An answer that is not a stream (a
// problem: unknown VM, no such route on an old server) is returned at once.
func (c *Client) Events(ctx context.Context, o EventsOptions) (*EventStream, error) {
	sctx, cancel := context.WithCancel(ctx)
	s := &EventStream{c: c, o: o, events: make(chan api.Event, 64), cancel: cancel, done: make(chan struct{}), last: o.After}
	body, err := s.open(sctx)
	if err != nil {
		cancel()
		return nil, err
	}
	go s.run(sctx, body)
	return s, nil
}

// Next returns the next event. It returns an error when ctx ends, when the
// stream is closed, or when it broke and could not be reopened.
func (s *EventStream) Next(ctx context.Context) (api.Event, error) {
	select {
	case e, ok := <-s.events:
		if ok {
			return e, nil
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		return api.Event{}, s.err
	case <-ctx.Done():
		return api.Event{}, ctx.Err()
	}
}

// Close ends the stream and waits for its reader to stop.
func (s *EventStream) Close() error {
	s.cancel()
	<-s.done
	return nil
}

func (s *EventStream) open(ctx context.Context) (io.ReadCloser, error) {
	q := url.Values{}
	if s.o.VM != "" {
		q.Set("vm", s.o.VM)
	}
	if s.o.Owner != "" {
		q.Set("owner", s.o.Owner)
	}
	s.mu.Lock()
	last := s.last
	s.mu.Unlock()
	target := s.c.base.String() + "/v1/events"
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", target, err)
	}
	req.Header.Set("Accept", "text/event-stream, application/problem+json")
	if last > 0 || s.o.FromStart {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(last, 10))
	}
	if s.c.token != "" {
		req.Header.Set("Authorization", "Bearer "+s.c.token)
	}
	if s.c.UserAgent != "" {
		req.Header.Set("User-Agent", s.c.UserAgent)
	}
	// A stream lasts: the client's overall timeout must not cut it.
	hc := http.Client{}
	if s.c.HTTP != nil {
		hc = *s.c.HTTP
	}
	hc.Timeout = 0
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("GET %s: %w", target, ctx.Err())
		}
		return nil, &TransportError{Method: http.MethodGet, URL: target, Err: err}
	}
	if resp.StatusCode != http.StatusOK || contentType(resp) != "text/event-stream" {
		defer resp.Body.Close()
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
		if resp.StatusCode == http.StatusOK {
			return nil, &TransportError{Method: http.MethodGet, URL: target,
				Err: fmt.Errorf("the answer is %s, not an event stream", contentType(resp))}
		}
		return nil, problemOf(resp, data, http.MethodGet, target)
	}
	return resp.Body, nil
}

func (s *EventStream) run(ctx context.Context, body io.ReadCloser) {
	defer close(s.done)
	defer close(s.events)
	failures := 0
	for {
		delivered, err := s.read(ctx, body)
		body.Close()
		if ctx.Err() != nil {
			s.end(ctx.Err())
			return
		}
		if delivered {
			failures = 0
		}
		for {
			failures++
			if failures >= maxPollFailures {
				s.end(fmt.Errorf("event stream: %w", err))
				return
			}
			select {
			case <-ctx.Done():
				s.end(ctx.Err())
				return
			case <-time.After(time.Duration(failures) * s.c.pollMin()):
			}
			body, err = s.open(ctx)
			if err == nil {
				break
			}
			if !retryable(err) {
				s.end(err)
				return
			}
		}
	}
}

func (s *EventStream) end(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// read delivers the events of one connection until it ends; delivered says
// whether any event came.
func (s *EventStream) read(ctx context.Context, body io.Reader) (delivered bool, err error) {
	r := bufio.NewReaderSize(body, 64<<10)
	var id, typ string
	var data bytes.Buffer
	for {
		line, err := readLine(r)
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the server never ends a stream by itself
			}
			return delivered, err
		}
		if line == "" {
			if data.Len() > 0 || typ != "" {
				var e api.Event
				if err := json.Unmarshal(data.Bytes(), &e); err != nil {
					return delivered, fmt.Errorf("event %s is not the JSON expected: %w", id, err)
				}
				if e.ID == 0 {
					e.ID, _ = strconv.ParseInt(id, 10, 64)
				}
				if e.Type == "" {
					e.Type = typ
				}
				select {
				case s.events <- e:
				case <-ctx.Done():
					return delivered, ctx.Err()
				}
				delivered = true
				s.mu.Lock()
				s.last = e.ID
				s.mu.Unlock()
			}
			id, typ = "", ""
			data.Reset()
			continue
		}
		if strings.HasPrefix(line, ":") {
			continue // a comment: keep-alive
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "id":
			id = value
		case "event":
			typ = value
		case "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(value)
		}
	}
}

// readLine reads one line without its end (\n or \r\n), at most maxLine.
func readLine(r *bufio.Reader) (string, error) {
	var b []byte
	for {
		chunk, isPrefix, err := r.ReadLine()
		if err != nil {
			return "", err
		}
		b = append(b, chunk...)
		if len(b) > maxLine {
			return "", fmt.Errorf("an event stream line is longer than %d bytes", maxLine)
		}
		if !isPrefix {
			return string(b), nil
		}
	}
}

func (c *Client) pollMin() time.Duration {
	if c.PollMin > 0 {
		return c.PollMin
	}
	return 500 * time.Millisecond
}
