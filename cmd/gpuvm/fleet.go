package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/gpuvm/gpuvm/pkg/api"
	"github.com/gpuvm/gpuvm/pkg/client"
)

// 'gpuvm admin drain' and 'undrain' take a GPU (its PCI address) or a node
// of the fleet (its name, as 'gpuvm hosts' lists it): a node's name never
// looks like a PCI address.

var pciAddressArg = regexp.MustCompile(`^(?i)(?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// isGPUAddress reports whether a drain's argument names a GPU.
func isGPUAddress(arg string) bool { return pciAddressArg.MatchString(arg) }

// drainNode drains a node and says what stays on it.
func drainNode(ctx context.Context, c *client.Client, w io.Writer, name, reason string, out outputOpts) error {
	if reason != "" {
		return usageError{errors.New("--reason is for GPUs: a node's drain has no reason ('gpuvm admin drain NODE')")}
	}
	st, err := c.DrainHost(ctx, name)
	if err != nil {
		return err
	}
	return writeHostDrain(w, st, out)
}

// undrainNode lets a drained node take VMs again.
func undrainNode(ctx context.Context, c *client.Client, w io.Writer, name string, out outputOpts) error {
	st, err := c.UndrainHost(ctx, name)
	if err != nil {
		return err
	}
	return writeHostDrain(w, st, out)
}

func writeHostDrain(w io.Writer, st *api.HostDrainState, out outputOpts) error {
	if out.json {
		return writeJSON(w, st)
	}
	if _, err := fmt.Fprintln(w, st.Message); err != nil {
		return err
	}
	if len(st.VMs) > 0 && st.State == api.HostDraining {
		_, err := fmt.Fprintf(w, "VMs on %s: %s\n", st.Host, strings.Join(st.VMs, ", "))
		return err
	}
	return nil
}
