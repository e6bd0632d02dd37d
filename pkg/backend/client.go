package backend

import (
	"context"
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/gpuvm/gpuvm/pkg/backend/proto"
)

// grpcClient is the Backend gpuvmd holds: it calls a plugin process over gRPC.
type grpcClient struct {
	name   string
	client pb.BackendClient
	done   context.Context // ends when the plugin process exits
	// changes is the highest count of finished Create and Remove calls a
	// Create or Remove's trailer reported (watch.go).
	changes atomic.Uint64
}

var _ Backend = (*grpcClient)(nil)

func (c *grpcClient) Info(ctx context.Context) (Info, error) {
	resp, err := call(ctx, c, "Info", func(ctx context.Context) (*pb.InfoResponse, error) {
		return c.client.Info(ctx, &pb.InfoRequest{})
	})
	return infoFromProto(resp.GetInfo()), err
}

func (c *grpcClient) Configure(ctx context.Context, cfg Config) error {
	_, err := call(ctx, c, "Configure", func(ctx context.Context) (*pb.ConfigureResponse, error) {
		return c.client.Configure(ctx, &pb.ConfigureRequest{Config: configToProto(cfg)})
	})
	return err
}

func (c *grpcClient) Inventory(ctx context.Context) (Inventory, error) {
	resp, err := call(ctx, c, "Inventory", func(ctx context.Context) (*pb.InventoryResponse, error) {
		return c.client.Inventory(ctx, &pb.InventoryRequest{})
	})
	return inventoryFromProto(resp.GetInventory()), err
}

func (c *grpcClient) Create(ctx context.Context, req CreateRequest) (Device, error) {
	var md metadata.MD
	resp, err := call(ctx, c, "Create", func(ctx context.Context) (*pb.CreateResponse, error) {
		return c.client.Create(ctx, createRequestToProto(req), grpc.Trailer(&md))
	})
	c.noteChanges(md)
	return deviceFromProto(resp.GetDevice()), err
}

func (c *grpcClient) Remove(ctx context.Context, req RemoveRequest) error {
	var md metadata.MD
	_, err := call(ctx, c, "Remove", func(ctx context.Context) (*pb.RemoveResponse, error) {
		return c.client.Remove(ctx, removeRequestToProto(req), grpc.Trailer(&md))
	})
	c.noteChanges(md)
	return err
}

func (c *grpcClient) Health(ctx context.Context) (Health, error) {
	resp, err := call(ctx, c, "Health", func(ctx context.Context) (*pb.HealthResponse, error) {
		return c.client.Health(ctx, &pb.HealthRequest{})
	})
	return healthFromProto(resp.GetHealth()), err
}

// call makes one RPC that ends as soon as either the caller's ctx ends or the
// plugin process exits. The caller's deadline is not sent to the plugin: the
// host alone decides when the call has run out of time, and cancels it then,
// so that the caller always gets its own ctx's error.
func call[T any](ctx context.Context, c *grpcClient, method string, rpc func(context.Context) (T, error)) (T, error) {
	if c.done.Err() != nil {
		var zero T
		return zero, c.unavailable("exited before %s", method)
	}
	callCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	defer context.AfterFunc(ctx, cancel)()
	defer context.AfterFunc(c.done, cancel)()
	resp, err := rpc(callCtx)
	if err != nil {
		return resp, c.error(ctx, method, err)
	}
	return resp, nil
}

// error turns the error of an RPC into one saying why it failed: the caller's
// ctx ended (the error wraps ctx.Err()), the backend failed (its *Error), or
// the plugin process is gone (CodeUnavailable).
func (c *grpcClient) error(ctx context.Context, method string, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("%s: %s: %w", c.label(), method, ctx.Err())
	}
	st := status.Convert(err)
	if e, ok := fromStatus(st); ok {
		return e
	}
	switch st.Code() {
	case codes.Unavailable, codes.Canceled, codes.DeadlineExceeded:
		if c.done.Err() != nil {
			return c.unavailable("exited during %s: %s", method, st.Message())
		}
		return c.unavailable("unreachable during %s: %s", method, st.Message())
	case codes.Unimplemented:
		return &Error{Code: CodeUnsupported, Reason: fmt.Sprintf("%s: plugin does not implement %s: %s", c.label(), method, st.Message())}
	default:
		return &Error{Code: CodeInternal, Reason: fmt.Sprintf("%s: %s: %s", c.label(), method, st.Message())}
	}
}

func (c *grpcClient) unavailable(format string, args ...any) *Error {
	return &Error{Code: CodeUnavailable, Reason: c.label() + ": plugin process " + fmt.Sprintf(format, args...)}
}

func (c *grpcClient) label() string {
	if c.name == "" {
		return "backend"
	}
	return "backend " + c.name
}
