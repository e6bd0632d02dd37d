package backend

import (
	"bytes"
	"context"
	"io"
	"log"
	"log/slog"
	"strings"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
)

// levelTrace is the slog level of hclog's Trace.
const levelTrace = slog.LevelDebug - 4

// NewHCLogger returns an hclog.Logger that logs to l, for go-plugin's
// ClientConfig.Logger and ServeConfig.Logger. The logger's name (see Named)
// becomes the attribute "plugin"; With adds attributes. Its level is that of
// l's handler until SetLevel overrides it, for it and all loggers derived
// from it.
func NewHCLogger(l *slog.Logger) hclog.Logger {
	return &hcLogger{log: l, level: new(atomic.Int32)}
}

type hcLogger struct {
	log   *slog.Logger
	name  string
	args  []any
	level *atomic.Int32 // an hclog.Level set by SetLevel; NoLevel: the handler's
}

var _ hclog.Logger = (*hcLogger)(nil)

func (l *hcLogger) Log(level hclog.Level, msg string, args ...any) {
	if level == hclog.NoLevel {
		level = hclog.Info
	}
	if level == hclog.Off || level < l.GetLevel() {
		return
	}
	attrs := make([]any, 0, len(l.args)+2+len(args))
	attrs = append(attrs, l.args...)
	if l.name != "" {
		attrs = append(attrs, "plugin", l.name)
	}
	attrs = append(attrs, args...)
	l.log.Log(context.Background(), slogLevel(level), msg, attrs...)
}

func (l *hcLogger) Trace(msg string, args ...any) { l.Log(hclog.Trace, msg, args...) }
func (l *hcLogger) Debug(msg string, args ...any) { l.Log(hclog.Debug, msg, args...) }
func (l *hcLogger) Info(msg string, args ...any)  { l.Log(hclog.Info, msg, args...) }
func (l *hcLogger) Warn(msg string, args ...any)  { l.Log(hclog.Warn, msg, args...) }
func (l *hcLogger) Error(msg string, args ...any) { l.Log(hclog.Error, msg, args...) }

func (l *hcLogger) IsTrace() bool { return l.enabled(hclog.Trace) }
func (l *hcLogger) IsDebug() bool { return l.enabled(hclog.Debug) }
func (l *hcLogger) IsInfo() bool  { return l.enabled(hclog.Info) }
func (l *hcLogger) IsWarn() bool  { return l.enabled(hclog.Warn) }
func (l *hcLogger) IsError() bool { return l.enabled(hclog.Error) }

func (l *hcLogger) enabled(level hclog.Level) bool { return level >= l.GetLevel() }

func (l *hcLogger) ImpliedArgs() []any { return l.args }

func (l *hcLogger) With(args ...any) hclog.Logger {
	c := *l
	c.args = append(l.args[:len(l.args):len(l.args)], args...)
	return &c
}

func (l *hcLogger) Name() string { return l.name }

func (l *hcLogger) Named(name string) hclog.Logger {
	if l.name != "" {
		name = l.name + "." + name
	}
	return l.ResetNamed(name)
}

func (l *hcLogger) ResetNamed(name string) hclog.Logger {
	c := *l
	c.name = name
	return &c
}

func (l *hcLogger) SetLevel(level hclog.Level) { l.level.Store(int32(level)) }

// GetLevel returns the level set by SetLevel, or else the lowest level the
// slog handler accepts.
func (l *hcLogger) GetLevel() hclog.Level {
	if level := hclog.Level(l.level.Load()); level != hclog.NoLevel {
		return level
	}
	for level := hclog.Trace; level <= hclog.Error; level++ {
		if l.log.Enabled(context.Background(), slogLevel(level)) {
			return level
		}
	}
	return hclog.Off
}

func (l *hcLogger) StandardLogger(opts *hclog.StandardLoggerOptions) *log.Logger {
	return log.New(l.StandardWriter(opts), "", 0)
}

// StandardWriter returns a writer that logs each write at Info, or at the
// level opts force or infer from a "[WARN]"-style prefix.
func (l *hcLogger) StandardWriter(opts *hclog.StandardLoggerOptions) io.Writer {
	if opts == nil {
		opts = &hclog.StandardLoggerOptions{}
	}
	return &stdWriter{log: l, opts: *opts}
}

type stdWriter struct {
	log  *hcLogger
	opts hclog.StandardLoggerOptions
}

var levelPrefixes = []struct {
	prefix string
	level  hclog.Level
}{
	{"[TRACE]", hclog.Trace}, {"[DEBUG]", hclog.Debug}, {"[INFO]", hclog.Info},
	{"[WARN]", hclog.Warn}, {"[ERROR]", hclog.Error}, {"[ERR]", hclog.Error},
}

func (w *stdWriter) Write(p []byte) (int, error) {
	msg := string(bytes.TrimRight(p, " \t\r\n"))
	level := hclog.Info
	if w.opts.ForceLevel != hclog.NoLevel || w.opts.InferLevels {
		for _, lp := range levelPrefixes {
			if rest, ok := strings.CutPrefix(msg, lp.prefix); ok {
				msg, level = strings.TrimSpace(rest), lp.level
				break
			}
		}
	}
	if w.opts.ForceLevel != hclog.NoLevel {
		level = w.opts.ForceLevel
	}
	w.log.Log(level, msg)
	return len(p), nil
}

// slogLevel maps an hclog level to slog.
func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return levelTrace
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// hclogLevel maps a slog level to the hclog level at or below it.
func hclogLevel(l slog.Level) hclog.Level {
	switch {
	case l < slog.LevelDebug:
		return hclog.Trace
	case l < slog.LevelInfo:
		return hclog.Debug
	case l < slog.LevelWarn:
		return hclog.Info
	case l < slog.LevelError:
		return hclog.Warn
	default:
		return hclog.Error
	}
}
