package backend

import (
	"context"
	"errors"
	"log/slog"
	"runtime/debug"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/gpuvm/gpuvm/pkg/backend/proto"
)

// errorDomain is the ErrorInfo domain of backend errors.
const errorDomain = "gpuvm.backend"

// grpcCodes is the gRPC code of each backend error code.
var grpcCodes = map[Code]codes.Code{
	CodeInvalid:     codes.InvalidArgument,
	CodeNotFound:    codes.NotFound,
	CodeConflict:    codes.FailedPrecondition,
	CodeExhausted:   codes.ResourceExhausted,
	CodeHost:        codes.Aborted,
	CodeUnavailable: codes.Unavailable,
	CodeUnsupported: codes.Unimplemented,
	CodeInternal:    codes.Internal,
}

// grpcServer serves a Backend in the plugin process.
type grpcServer struct {
	pb.UnimplementedBackendServer
	impl Backend
	// changes counts the finished Create and Remove calls, for
	// WatchInventory (watch.go).
	changes changeHub
}

func (s *grpcServer) Info(ctx context.Context, _ *pb.InfoRequest) (*pb.InfoResponse, error) {
	return serve(ctx, "Info", func() (*pb.InfoResponse, error) {
		info, err := s.impl.Info(ctx)
		return &pb.InfoResponse{Info: infoToProto(info)}, err
	})
}

func (s *grpcServer) Configure(ctx context.Context, req *pb.ConfigureRequest) (*pb.ConfigureResponse, error) {
	return serve(ctx, "Configure", func() (*pb.ConfigureResponse, error) {
		return &pb.ConfigureResponse{}, s.impl.Configure(ctx, configFromProto(req.GetConfig()))
	})
}

func (s *grpcServer) Inventory(ctx context.Context, _ *pb.InventoryRequest) (*pb.InventoryResponse, error) {
	return serve(ctx, "Inventory", func() (*pb.InventoryResponse, error) {
		inv, err := s.impl.Inventory(ctx)
		return &pb.InventoryResponse{Inventory: inventoryToProto(inv)}, err
	})
}

func (s *grpcServer) Create(ctx context.Context, req *pb.CreateRequest) (*pb.CreateResponse, error) {
	defer s.noteChange(ctx)
	return serve(ctx, "Create", func() (*pb.CreateResponse, error) {
		dev, err := s.impl.Create(ctx, createRequestFromProto(req))
		return &pb.CreateResponse{Device: deviceToProto(dev)}, err
	})
}

func (s *grpcServer) Remove(ctx context.Context, req *pb.RemoveRequest) (*pb.RemoveResponse, error) {
	defer s.noteChange(ctx)
	return serve(ctx, "Remove", func() (*pb.RemoveResponse, error) {
		return &pb.RemoveResponse{}, s.impl.Remove(ctx, removeRequestFromProto(req))
	})
}

func (s *grpcServer) Health(ctx context.Context, _ *pb.HealthRequest) (*pb.HealthResponse, error) {
	return serve(ctx, "Health", func() (*pb.HealthResponse, error) {
		h, err := s.impl.Health(ctx)
		return &pb.HealthResponse{Health: healthToProto(h)}, err
	})
}

// serve runs one call of the backend: it turns the error into a gRPC status,
// and a panic into an internal error naming the method, so that no request
// can bring the plugin process down.
func serve[T any](ctx context.Context, method string, call func() (*T, error)) (resp *T, err error) {
	defer func() {
		if r := recover(); r != nil {
			slog.ErrorContext(ctx, "backend panicked", "method", method, "panic", r, "stack", string(debug.Stack()))
			resp, err = nil, toStatus(Errorf(CodeInternal, "", "backend panicked in %s: %v", method, r))
		}
	}()
	resp, err = call()
	if err != nil {
		return nil, toStatus(err)
	}
	return resp, nil
}

// toStatus turns a backend error into a gRPC status whose ErrorInfo carries
// the error's Code and GPU, from which fromStatus rebuilds the same *Error.
// An error that is not an *Error travels as CodeInternal.
func toStatus(err error) error {
	code, gpu, reason := CodeInternal, "", err.Error()
	var e *Error
	if errors.As(err, &e) {
		code, gpu = e.Code, e.GPU
		if gpu != "" {
			// Keep the wrapping text, drop the "GPU x: " the client re-adds.
			reason = strings.Replace(reason, e.Error(), e.Reason, 1)
		}
	}
	c, ok := grpcCodes[code]
	switch {
	case e == nil && errors.Is(err, context.Canceled):
		c = codes.Canceled
	case e == nil && errors.Is(err, context.DeadlineExceeded):
		c = codes.DeadlineExceeded
	case !ok:
		c = codes.Internal
	}
	st := status.New(c, reason)
	info := &errdetails.ErrorInfo{Reason: string(code), Domain: errorDomain}
	if gpu != "" {
		info.Metadata = map[string]string{"gpu": gpu}
	}
	if withInfo, err := st.WithDetails(info); err == nil {
		st = withInfo
	}
	return st.Err()
}

// fromStatus rebuilds the *Error that toStatus sent; ok is false when st
// carries none, i.e. the call did not get an answer from the backend.
func fromStatus(st *status.Status) (err *Error, ok bool) {
	for _, d := range st.Details() {
		if info, isInfo := d.(*errdetails.ErrorInfo); isInfo && info.GetDomain() == errorDomain {
			return &Error{Code: Code(info.GetReason()), GPU: info.GetMetadata()["gpu"], Reason: st.Message()}, true
		}
	}
	return nil, false
}
