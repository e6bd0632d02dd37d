package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// SubmitTask submits a task (POST /v1/tasks).
func (c *Client) SubmitTask(ctx context.Context, req api.CreateTaskRequest) (*api.Task, error) {
	var out api.Task
	if err := c.do(ctx, http.MethodPost, "/v1/tasks", nil, nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListTasks lists the caller's tasks, newest first (an admin: owner's, or
// everybody's when owner is "").
func (c *Client) ListTasks(ctx context.Context, owner string) (*api.TaskList, error) {
	var q url.Values
	if owner != "" {
		q = url.Values{"owner": {owner}}
	}
	var out api.TaskList
	if err := c.do(ctx, http.MethodGet, "/v1/tasks", q, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetTask is one task.
func (c *Client) GetTask(ctx context.Context, id string) (*api.Task, error) {
	var out api.Task
	if err := c.do(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(id), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetTaskPage is one task with, for an array, the page of its elements
// after the cursor after ("": from the first) of at most limit (0: the
// server's default).
func (c *Client) GetTaskPage(ctx context.Context, id, after string, limit int) (*api.Task, error) {
	q := url.Values{}
	if after != "" {
		q.Set("after", after)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out api.Task
	if err := c.do(ctx, http.MethodGet, "/v1/tasks/"+url.PathEscape(id), q, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetTaskAll is one task with, for an array, every element: it follows
// the pages of its elements to the end (the last page's counts kept).
func (c *Client) GetTaskAll(ctx context.Context, id string) (*api.Task, error) {
	const page = 1000 // the server's most
	var elems []api.Task
	after := ""
	for {
		t, err := c.GetTaskPage(ctx, id, after, page)
		if err != nil {
			return nil, err
		}
		elems = append(elems, t.Elements...)
		if t.ElementsNext == "" || t.ElementsNext == after {
			t.Elements, t.ElementsNext = elems, ""
			return t, nil
		}
		after = t.ElementsNext
	}
}

// CancelTask cancels a task.
func (c *Client) CancelTask(ctx context.Context, id string) (*api.Task, error) {
	var out api.Task
	if err := c.do(ctx, http.MethodPost, "/v1/tasks/"+url.PathEscape(id)+"/cancel", nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// TaskLogs writes a task's output from offset to w; with follow it goes
// on until the task has ended (or ctx ends). It returns the bytes written.
func (c *Client) TaskLogs(ctx context.Context, id string, offset int64, follow bool, w io.Writer) (int64, error) {
	q := url.Values{}
	if offset > 0 {
		q.Set("offset", strconv.FormatInt(offset, 10))
	}
	if follow {
		q.Set("follow", "1")
	}
	target := c.base.String() + "/v1/tasks/" + url.PathEscape(id) + "/logs"
	if len(q) > 0 {
		target += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return 0, fmt.Errorf("GET %s: %w", target, err)
	}
	req.Header.Set("Accept", "text/plain, application/problem+json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if c.UserAgent != "" {
		req.Header.Set("User-Agent", c.UserAgent)
	}
	// A followed log lasts: the client's overall timeout must not cut it.
	hc := http.Client{}
	if c.HTTP != nil {
		hc = *c.HTTP
	}
	if follow {
		hc.Timeout = 0
	}
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("GET %s: %w", target, ctx.Err())
		}
		return 0, &TransportError{Method: http.MethodGet, URL: target, Err: err}
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
		return 0, problemOf(resp, data, http.MethodGet, target)
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil && ctx.Err() == nil {
		return n, &TransportError{Method: http.MethodGet, URL: target, Err: fmt.Errorf("read the log: %w", err)}
	}
	return n, ctx.Err()
}
