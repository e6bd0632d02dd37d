package backend

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	pb "github.com/gpuvm/gpuvm/pkg/backend/proto"
)

// connect serves impl over an in-memory go-plugin gRPC connection and returns
// the host's client for it, with the server to stop.
func connect(t *testing.T, impl Backend) (Backend, *plugin.GRPCServer) {
	t.Helper()
	client, server := plugin.TestPluginGRPCConn(t, true, map[string]plugin.Plugin{
		PluginType: &GRPCPlugin{Impl: impl, Name: "vgpu"},
	})
	t.Cleanup(func() { client.Close() }) // which stops the server too
	raw, err := client.Dispense(PluginType)
	if err != nil {
		t.Fatal(err)
	}
	return raw.(Backend), server
}

func TestGRPCRoundTrip(t *testing.T) {
	var (
		info   = filled[Info]()
		cfg    = filled[Config]()
		inv    = filled[Inventory]()
		req    = filled[CreateRequest]()
		dev    = filled[Device]()
		rm     = filled[RemoveRequest]()
		health = filled[Health]()
		gotArg any
	)
	mock := &Mock{
		InfoF:      func(context.Context) (Info, error) { return info, nil },
		ConfigureF: func(_ context.Context, c Config) error { gotArg = c; return nil },
		InventoryF: func(context.Context) (Inventory, error) { return inv, nil },
		CreateF:    func(_ context.Context, r CreateRequest) (Device, error) { gotArg = r; return dev, nil },
		RemoveF:    func(_ context.Context, r RemoveRequest) error { gotArg = r; return nil },
		HealthF:    func(context.Context) (Health, error) { return health, nil },
	}
	b, _ := connect(t, mock)

	tests := []struct {
		name    string
		call    func(context.Context) (any, error)
		want    any // the result
		wantArg any // what the backend received
	}{
		{"Info", func(ctx context.Context) (any, error) { return b.Info(ctx) }, info, nil},
		{"Configure", func(ctx context.Context) (any, error) { return nil, b.Configure(ctx, cfg) }, nil, cfg},
		{"Inventory", func(ctx context.Context) (any, error) { return b.Inventory(ctx) }, inv, nil},
		{"Create", func(ctx context.Context) (any, error) { return b.Create(ctx, req) }, dev, req},
		{"Remove", func(ctx context.Context) (any, error) { return nil, b.Remove(ctx, rm) }, nil, rm},
		{"Health", func(ctx context.Context) (any, error) { return b.Health(ctx) }, health, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			gotArg = nil
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			got, err := tc.call(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("result\n got: %+v\nwant: %+v", got, tc.want)
			}
			if !reflect.DeepEqual(gotArg, tc.wantArg) {
				t.Errorf("backend received\n got: %+v\nwant: %+v", gotArg, tc.wantArg)
			}
		})
	}
}

func TestGRPCErrorMapping(t *testing.T) {
	const gpu = "0000:41:00.0"
	tests := []struct {
		code     Code
		grpc     codes.Code
		sentinel error // nil: none exists
	}{
		{CodeInvalid, codes.InvalidArgument, ErrInvalid},
		{CodeNotFound, codes.NotFound, ErrNotFound},
		{CodeConflict, codes.FailedPrecondition, ErrConflict},
		{CodeExhausted, codes.ResourceExhausted, ErrExhausted},
		{CodeHost, codes.Aborted, ErrHost},
		{CodeUnavailable, codes.Unavailable, ErrUnavailable},
		{CodeUnsupported, codes.Unimplemented, ErrUnsupported},
		{CodeInternal, codes.Internal, nil},
		{"from_a_newer_backend", codes.Internal, nil},
	}
	var sent error
	b, _ := connect(t, &Mock{CreateF: func(context.Context, CreateRequest) (Device, error) { return Device{}, sent }})
	for _, tc := range tests {
		for _, gpu := range []string{gpu, ""} {
			t.Run(fmt.Sprintf("%s/gpu=%q", tc.code, gpu), func(t *testing.T) {
				want := Errorf(tc.code, gpu, "%s went wrong", tc.code)
				if got := status.Code(toStatus(want)); got != tc.grpc {
					t.Errorf("gRPC code %v, want %v", got, tc.grpc)
				}
				sent = want
				_, err := b.Create(t.Context(), CreateRequest{GPU: gpu})
				var got *Error
				if !errors.As(err, &got) {
					t.Fatalf("error %T %v is not an *Error", err, err)
				}
				if *got != *want {
					t.Errorf("got %#v, want %#v", got, want)
				}
				if tc.sentinel != nil && !errors.Is(err, tc.sentinel) {
					t.Errorf("errors.Is(%v, %v) is false", err, tc.sentinel)
				}
				for _, other := range []error{ErrInvalid, ErrExhausted, ErrUnavailable} {
					if other != tc.sentinel && errors.Is(err, other) {
						t.Errorf("errors.Is(%v, %v) is true", err, other)
					}
				}
			})
		}
	}
}

func TestGRPCErrorWrapping(t *testing.T) {
	tests := []struct {
		name string
		sent error
		want Error
		msg  string
	}{
		{
			name: "wrapped *Error keeps its context, code and GPU",
			sent: fmt.Errorf("creating vGPU: %w", Errorf(CodeConflict, "0000:41:00.0", "GPU is in MIG mode")),
			want: Error{Code: CodeConflict, GPU: "0000:41:00.0", Reason: "creating vGPU: GPU is in MIG mode"},
			msg:  "GPU 0000:41:00.0: creating vGPU: GPU is in MIG mode",
		},
		{
			name: "wrapped *Error without GPU",
			sent: fmt.Errorf("creating vGPU: %w", Errorf(CodeExhausted, "", "no GPU has room")),
			want: Error{Code: CodeExhausted, Reason: "creating vGPU: no GPU has room"},
			msg:  "creating vGPU: no GPU has room",
		},
		{
			name: "plain error is internal",
			sent: errors.New("sysfs: permission denied"),
			want: Error{Code: CodeInternal, Reason: "sysfs: permission denied"},
			msg:  "sysfs: permission denied",
		},
		{
			name: "backend's own deadline is internal",
			sent: fmt.Errorf("waiting for nvidia-smi: %w", context.DeadlineExceeded),
			want: Error{Code: CodeInternal, Reason: "waiting for nvidia-smi: context deadline exceeded"},
			msg:  "waiting for nvidia-smi: context deadline exceeded",
		},
	}
	var sent error
	b, _ := connect(t, &Mock{RemoveF: func(context.Context, RemoveRequest) error { return sent }})
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sent = tc.sent
			err := b.Remove(t.Context(), RemoveRequest{ID: "x"})
			var got *Error
			if !errors.As(err, &got) || *got != tc.want {
				t.Errorf("got %#v, want %#v", err, &tc.want)
			}
			if err != nil && err.Error() != tc.msg {
				t.Errorf("message %q, want %q", err.Error(), tc.msg)
			}
		})
	}
}

func TestGRPCPanicRecovery(t *testing.T) {
	var nilMap map[string]int
	mock := &Mock{
		InfoF:      func(context.Context) (Info, error) { panic("boom") },
		ConfigureF: func(context.Context, Config) error { nilMap["x"] = 1; return nil },
		InventoryF: func(context.Context) (Inventory, error) { panic(errors.New("bad sysfs")) },
		CreateF:    func(context.Context, CreateRequest) (Device, error) { var d *Device; return *d, nil },
		RemoveF:    func(context.Context, RemoveRequest) error { panic(fmt.Sprintf("%d", []int{}[0])) },
		HealthF:    func(context.Context) (Health, error) { panic(nil) },
	}
	b, _ := connect(t, mock)
	tests := []struct {
		method string
		call   func(context.Context) error
		panic  string // in the reason
	}{
		{"Info", func(ctx context.Context) error { _, err := b.Info(ctx); return err }, "boom"},
		{"Configure", func(ctx context.Context) error { return b.Configure(ctx, Config{}) }, "assignment to entry in nil map"},
		{"Inventory", func(ctx context.Context) error { _, err := b.Inventory(ctx); return err }, "bad sysfs"},
		{"Create", func(ctx context.Context) error { _, err := b.Create(ctx, CreateRequest{}); return err }, "nil pointer dereference"},
		{"Remove", func(ctx context.Context) error { return b.Remove(ctx, RemoveRequest{}) }, "index out of range"},
		{"Health", func(ctx context.Context) error { _, err := b.Health(ctx); return err }, "panic called with nil"},
	}
	for _, tc := range tests {
		t.Run(tc.method, func(t *testing.T) {
			err := tc.call(t.Context())
			if CodeOf(err) != CodeInternal {
				t.Errorf("code %q, want %q (error %v)", CodeOf(err), CodeInternal, err)
			}
			want := "backend panicked in " + tc.method
			if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), tc.panic) {
				t.Errorf("error %v, want it to contain %q and %q", err, want, tc.panic)
			}
		})
	}
	// The server survived every panic.
	mock.HealthF = func(context.Context) (Health, error) { return Health{OK: true}, nil }
	if h, err := b.Health(t.Context()); err != nil || !h.OK {
		t.Errorf("Health after panics: %+v, %v", h, err)
	}
}

func TestGRPCClientFailures(t *testing.T) {
	t.Run("plugin exits mid-call", func(t *testing.T) {
		entered := make(chan struct{})
		client, _ := plugin.TestPluginGRPCConn(t, true, PluginMap(&Mock{
			CreateF: func(ctx context.Context, _ CreateRequest) (Device, error) {
				close(entered)
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Second):
				}
				return Device{}, ctx.Err()
			},
		}))
		t.Cleanup(func() { client.Close() })
		done, exit := context.WithCancel(context.Background())
		raw, _ := (&GRPCPlugin{Name: "vgpu"}).GRPCClient(done, nil, client.Conn)
		b := raw.(Backend)
		go func() {
			<-entered
			exit()
		}()
		start := time.Now()
		_, err := b.Create(t.Context(), CreateRequest{})
		wantUnavailable(t, err, "backend vgpu: plugin process exited during Create")
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Create returned after %v", d)
		}
		_, err = b.Info(t.Context())
		wantUnavailable(t, err, "backend vgpu: plugin process exited before Info")
	})

	t.Run("server gone", func(t *testing.T) {
		b, server := connect(t, &Mock{})
		server.Stop()
		err := b.Remove(t.Context(), RemoveRequest{ID: "x"})
		wantUnavailable(t, err, "backend vgpu: plugin process unreachable during Remove")
	})

	t.Run("connection refused", func(t *testing.T) {
		conn, err := grpc.NewClient("unix://"+filepath.Join(t.TempDir(), "none.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		raw, _ := (&GRPCPlugin{Name: "mig"}).GRPCClient(context.Background(), nil, conn)
		_, err = raw.(Backend).Health(t.Context())
		wantUnavailable(t, err, "backend mig: plugin process unreachable during Health")
	})

	t.Run("caller gives up", func(t *testing.T) {
		canceled := make(chan error, 1)
		b, _ := connect(t, &Mock{
			InventoryF: func(ctx context.Context) (Inventory, error) {
				select {
				case <-ctx.Done():
					canceled <- ctx.Err()
				case <-time.After(10 * time.Second):
				}
				return Inventory{}, ctx.Err()
			},
		})
		ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		_, err := b.Inventory(ctx)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("error %v, want context.DeadlineExceeded", err)
		}
		select {
		case <-canceled:
		case <-time.After(5 * time.Second):
			t.Error("the backend's ctx was not canceled")
		}
	})

	t.Run("method not implemented", func(t *testing.T) {
		sock := filepath.Join(t.TempDir(), "old.sock")
		ln, err := net.Listen("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		s := grpc.NewServer()
		pb.RegisterBackendServer(s, pb.UnimplementedBackendServer{})
		go s.Serve(ln)
		defer s.Stop()
		conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		raw, _ := (&GRPCPlugin{Name: "vgpu"}).GRPCClient(context.Background(), nil, conn)
		_, err = raw.(Backend).Create(t.Context(), CreateRequest{})
		if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "backend vgpu: plugin does not implement Create") {
			t.Errorf("error %v, want CodeUnsupported naming the method", err)
		}
	})
}

func wantUnavailable(t *testing.T, err error, reason string) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeUnavailable || !strings.HasPrefix(e.Reason, reason) {
		t.Errorf("error %#v, want CodeUnavailable with reason %q…", err, reason)
	}
}

func TestNegotiateAPIVersion(t *testing.T) {
	tests := []struct {
		name         string
		host, plugin []string
		want         string
		wantErr      string
	}{
		{name: "same", host: []string{"v1"}, plugin: []string{"v1"}, want: "v1"},
		{name: "highest common", host: []string{"v1", "v2", "v3"}, plugin: []string{"v3", "v2", "v4"}, want: "v3"},
		{name: "semver order", host: []string{"v2", "v10"}, plugin: []string{"v10", "v2"}, want: "v10"},
		{name: "plugin older", host: []string{"v1", "v2"}, plugin: []string{"v1"}, want: "v1"},
		{name: "none common", host: []string{"v1"}, plugin: []string{"v2", "v3"}, wantErr: "no common API version: host speaks v1, plugin speaks v2, v3"},
		{name: "plugin speaks none", host: []string{"v1"}, wantErr: "host speaks v1, plugin speaks none"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NegotiateAPIVersion(tc.host, tc.plugin)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
