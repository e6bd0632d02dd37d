package config

import (
	"testing"
	"time"
)

func TestMonitorDefaults(t *testing.T) {
	cfg, diags := Parse(Source{Name: "p.hcl", Data: []byte(`server {}`)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	want := Monitor{Interval: 10 * time.Second, RawRetention: 24 * time.Hour, Downsample: 5 * time.Minute,
		DownsampledRetention: 90 * 24 * time.Hour, IdleThreshold: 5, MetricsAuth: MetricsAuthNone}
	if got := cfg.Server.Monitor; got != want {
		t.Errorf("monitor defaults = %+v, want %+v", got, want)
	}
	// Without a server block at all.
	cfg, diags = Parse(Source{Name: "p.hcl", Data: []byte(``)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if got := cfg.Server.Monitor; got != want {
		t.Errorf("monitor defaults without a server block = %+v, want %+v", got, want)
	}
}

func TestMonitorBlock(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       Monitor
		err        string // a diagnostic's summary; "" for none
	}{
		{"all set", `interval = "30s"
raw_retention = "2d"
downsample = "15m"
downsampled_retention = "1w"
idle_threshold = 2.5
metrics_auth = "token"`,
			Monitor{Interval: 30 * time.Second, RawRetention: 48 * time.Hour, Downsample: 15 * time.Minute,
				DownsampledRetention: 7 * 24 * time.Hour, IdleThreshold: 2.5, MetricsAuth: MetricsAuthToken}, ""},
		{"interval too short", `interval = "0"`, Monitor{}, "Invalid interval"},
		{"interval too long", `interval = "1h"
downsample = "1h"`, Monitor{}, "Invalid interval"},
		{"bad duration", `interval = "ten"`, Monitor{}, "Invalid duration"},
		{"downsample below interval", `interval = "1m"
downsample = "30s"`, Monitor{}, "Invalid downsample"},
		{"downsample not dividing a day", `downsample = "7m"`, Monitor{}, "Invalid downsample"},
		{"raw shorter than a period", `raw_retention = "1m"`, Monitor{}, "Invalid raw_retention"},
		{"averages shorter than raw", `downsampled_retention = "1h"`, Monitor{}, "Invalid downsampled_retention"},
		{"idle threshold zero", `idle_threshold = 0`, Monitor{}, "Invalid idle_threshold"},
		{"idle threshold above 100", `idle_threshold = 101`, Monitor{}, "Invalid idle_threshold"},
		{"unknown auth", `metrics_auth = "basic"`, Monitor{}, "Invalid metrics_auth"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkBlock(t, "server {\n monitor {\n"+tc.body+"\n }\n}\n", tc.err, 0, tc.want, func(c *Config) Monitor { return c.Server.Monitor })
		})
	}
}

func TestAlertMetricXID(t *testing.T) {
	cfg, diags := Parse(Source{Name: "p.hcl", Data: []byte(`
policy {
  alert "xid" {
    metric   = "gpu_xid_errors"
    above    = 0
    duration = "1h"
    webhook  = "http://hooks.example/gpu"
  }
}`)})
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	if len(cfg.Policy.Alerts) != 1 || cfg.Policy.Alerts[0].Metric != "gpu_xid_errors" || cfg.Policy.Alerts[0].Duration != time.Hour {
		t.Errorf("alerts = %+v", cfg.Policy.Alerts)
	}
}
