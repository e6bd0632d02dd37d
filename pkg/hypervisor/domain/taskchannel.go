package domain

import (
	"errors"
	"fmt"

	"libvirt.org/go/libvirtxml"
)

// TaskChannelName is the name of the virtio-serial port a task's runner
// talks to gpuvmd on: /dev/virtio-ports/org.gpuvm.task.0 in the guest.
const TaskChannelName = "org.gpuvm.task.0"

// ErrNoTaskChannel says a domain has no task channel, or that libvirt
// has not placed its socket yet (it does at start).
var ErrNoTaskChannel = errors.New("no task channel")

// TaskChannelPath is the host path of the unix socket of a running
// domain's task channel, read from its live XML: libvirt picks it when the
// domain starts.
func TaskChannelPath(domainXML string) (string, error) {
	var d libvirtxml.Domain
	if err := d.Unmarshal(domainXML); err != nil {
		return "", fmt.Errorf("domain XML: %w", err)
	}
	if d.Devices == nil {
		return "", ErrNoTaskChannel
	}
	for _, c := range d.Devices.Channels {
		if c.Target == nil || c.Target.VirtIO == nil || c.Target.VirtIO.Name != TaskChannelName {
			continue
		}
		if c.Source == nil || c.Source.UNIX == nil || c.Source.UNIX.Path == "" {
			return "", fmt.Errorf("%w: its socket has no path yet (is the domain running?)", ErrNoTaskChannel)
		}
		return c.Source.UNIX.Path, nil
	}
	return "", ErrNoTaskChannel
}

// SetTaskChannel gives d the task channel (on) or takes it away, and
// reports whether d changed.
func SetTaskChannel(d *libvirtxml.Domain, on bool) bool {
	if d.Devices == nil {
		d.Devices = &libvirtxml.DomainDeviceList{}
	}
	var kept []libvirtxml.DomainChannel
	had := false
	for _, c := range d.Devices.Channels {
		if c.Target != nil && c.Target.VirtIO != nil && c.Target.VirtIO.Name == TaskChannelName {
			had = true
			if on {
				kept = append(kept, c)
			}
			continue
		}
		kept = append(kept, c)
	}
	switch {
	case had == on:
		return false
	case on:
		kept = append(kept, taskChannel())
	}
	d.Devices.Channels = kept
	return true
}

// taskChannel is the task channel's device: a unix socket libvirt places.
func taskChannel() libvirtxml.DomainChannel {
	return libvirtxml.DomainChannel{
		Source: &libvirtxml.DomainChardevSource{UNIX: &libvirtxml.DomainChardevSourceUNIX{Mode: "bind"}},
		Target: &libvirtxml.DomainChannelTarget{VirtIO: &libvirtxml.DomainChannelTargetVirtIO{Name: TaskChannelName}},
	}
}
