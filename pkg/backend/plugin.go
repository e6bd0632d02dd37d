package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/go-plugin"
	"golang.org/x/mod/semver"
	"google.golang.org/grpc"

	pb "github.com/gpuvm/gpuvm/pkg/backend/proto"
)

// Handshake is shared by gpuvmd and every backend binary. ProtocolVersion is
// the transport's version; the API version is negotiated after start (see
// APIVersions). The cookie only keeps a backend binary from being run by
// hand: it is a UX guard, not security.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "GPUVM_BACKEND_PLUGIN",
	MagicCookieValue: "fbcf6fa0292cb4e1adb41ff85434bc7bcf51bb604d9d850ba4445b069c9bd119",
}

// PluginType is the key of the backend plugin in a go-plugin plugin map.
const PluginType = "backend"

// APIVersions are the backend API versions this build speaks, oldest first.
// v1.1 adds WatchInventory (watch.go); a v1 backend is polled.
var APIVersions = []string{"v1", APIVersionWatch}

// NegotiateAPIVersion returns the highest API version in both host and plugin.
func NegotiateAPIVersion(host, plugin []string) (string, error) {
	var best string
	for _, v := range plugin {
		if slices.Contains(host, v) && (best == "" || semver.Compare(v, best) > 0) {
			best = v
		}
	}
	if best == "" {
		return "", fmt.Errorf("no common API version: host speaks %s, plugin speaks %s", listOrNone(host), listOrNone(plugin))
	}
	return best, nil
}

func listOrNone(vs []string) string {
	if len(vs) == 0 {
		return "none"
	}
	return strings.Join(vs, ", ")
}

// GRPCPlugin is the go-plugin glue for Backend: the plugin binary serves Impl,
// and gpuvmd dispenses a client that implements Backend over gRPC.
type GRPCPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	// Impl is the backend a plugin binary serves; unused by the host.
	Impl Backend
	// Name labels the host's errors ("backend vgpu: ..."); unused by the
	// plugin binary.
	Name string
}

var _ plugin.GRPCPlugin = (*GRPCPlugin)(nil)

// GRPCServer registers Impl with the plugin's gRPC server.
func (p *GRPCPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	if p.Impl == nil {
		return errors.New("backend plugin has no implementation to serve")
	}
	pb.RegisterBackendServer(s, &grpcServer{impl: p.Impl})
	return nil
}

// GRPCClient returns a Backend that calls the plugin over conn. ctx ends when
// the plugin process exits, and with it every call in flight.
func (p *GRPCPlugin) GRPCClient(ctx context.Context, _ *plugin.GRPCBroker, conn *grpc.ClientConn) (any, error) {
	return &grpcClient{name: p.Name, client: pb.NewBackendClient(conn), done: ctx}, nil
}

// PluginMap is the plugin set a backend binary serves impl with.
func PluginMap(impl Backend) map[string]plugin.Plugin {
	return map[string]plugin.Plugin{PluginType: &GRPCPlugin{Impl: impl}}
}

// Serve is the main of a backend binary: it serves impl to gpuvmd until
// gpuvmd closes the connection or kills the process. It makes PluginLogger the
// default slog logger, so that the binary's slog calls reach gpuvmd's log.
func Serve(impl Backend) {
	log := PluginLogger()
	slog.SetDefault(log)
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         PluginMap(impl),
		GRPCServer:      plugin.DefaultGRPCServer,
		Logger:          NewHCLogger(log),
	})
}

// pluginStderr is the stderr gpuvmd reads log lines from, taken before
// plugin.Serve points os.Stderr at its own stdio stream.
var pluginStderr io.Writer = os.Stderr

// PluginLogger returns the logger of a backend binary: JSON lines on stderr in
// the shape of hclog's JSON format (@level, @message, @timestamp and the
// attributes), which go-plugin in gpuvmd parses and logs again at the same
// level.
func PluginLogger() *slog.Logger { return newPluginLogger(pluginStderr) }

// hclogTimeFormat is the @timestamp layout go-plugin parses.
const hclogTimeFormat = "2006-01-02T15:04:05.000000Z07:00"

func newPluginLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level: slog.LevelDebug,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if len(groups) > 0 {
				return a
			}
			switch v := a.Value.Any().(type) {
			case time.Time:
				if a.Key == slog.TimeKey {
					return slog.String("@timestamp", v.Format(hclogTimeFormat))
				}
			case slog.Level:
				if a.Key == slog.LevelKey {
					return slog.String("@level", hclogLevel(v).String())
				}
			case string:
				if a.Key == slog.MessageKey {
					return slog.String("@message", v)
				}
			}
			return a
		},
	}))
}
