package hypervisor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"libvirt.org/go/libvirt"
)

// Disk snapshots of a VM's system disk (docs/snapshots.md): internal qcow2
// snapshots of its overlay, never libvirt snapshot objects. libvirt 9.0
// (Debian 12) cannot revert an external snapshot (that came in 9.7), and
// refuses a disk-only internal snapshot of a running domain; internal
// snapshots live inside the overlay, so a revert is one qemu-img call that
// moves no file and a VM's deletion takes its snapshots with its disk.
//
//   - a stopped VM: qemu-img snapshot -c / -a / -d on the overlay file,
//     which nothing else holds open;
//   - a running VM: QEMU's own blockdev-snapshot-internal-sync and
//     blockdev-snapshot-delete-internal-sync through libvirt's QEMU monitor
//     passthrough (virDomainQemuMonitorCommand), the file systems frozen
//     through the guest agent first (virDomainFSFreeze) when it answers;
//   - a restore needs the VM stopped.
//
// gpuvm's database is the only record of the snapshots; each tag carries the
// installation's id (store.SnapshotTag).

// ErrDomainRunning: a restore was asked of a domain that is not shut off.
var ErrDomainRunning = errors.New("the domain is not shut off")

// QemuImg is the qemu-img the disk snapshots run (a test may change it).
var QemuImg = "qemu-img"

// SnapshotResult says how a snapshot was taken.
type SnapshotResult struct {
	// Quiesced: the guest agent froze the file systems for it; else it is
	// crash-consistent, and FreezeNote says why it was not frozen ("" for
	// a stopped VM).
	Quiesced   bool
	FreezeNote string
	Live       bool
}

// systemDisk is the path of a gpuvm domain's disk overlay: the first qcow2
// volume of its metadata.
func (c *Conn) systemDisk(ctx context.Context, h *handle) (string, error) {
	for _, v := range h.meta.Volumes {
		if !strings.HasSuffix(v.Name, ".qcow2") {
			continue
		}
		if c.testDiskDir != "" && c.isTestDriver() {
			return filepath.Join(c.testDiskDir, v.Name), nil // WithTestDiskDir
		}
		return c.VolumePath(ctx, v.Pool, v.Name)
	}
	return "", errors.New("the VM has no disk overlay (it boots a kernel directly)")
}

// snapshotTarget looks up a domain, its disk and whether it runs.
func (c *Conn) snapshotTarget(ctx context.Context, uuid, op string) (*handle, string, bool, error) {
	h, err := c.lookup(ctx, uuid, op)
	if err != nil {
		return nil, "", false, err
	}
	info, err := c.info(ctx, h)
	if err != nil {
		h.Free()
		return nil, "", false, err
	}
	path, err := c.systemDisk(ctx, h)
	if err != nil {
		h.Free()
		return nil, "", false, vmError(h.name, op, err)
	}
	return h, path, info.State != StateShutoff, nil
}

// SnapshotDisk takes a snapshot named tag of a VM's disk overlay: with the
// guest's file systems frozen when it runs and its agent answers. A tag
// that is on the disk already is not taken again (an interrupted snapshot
// resumed).
func (c *Conn) SnapshotDisk(ctx context.Context, uuid, tag string) (SnapshotResult, error) {
	h, path, live, err := c.snapshotTarget(ctx, uuid, "snapshot disk")
	if err != nil {
		return SnapshotResult{}, err
	}
	defer h.Free()
	res := SnapshotResult{Live: live}
	if tags, err := diskSnapshotTags(ctx, path); err != nil {
		return res, vmError(h.name, "snapshot disk", err)
	} else if slices.Contains(tags, tag) {
		return res, nil
	}
	if !live {
		return res, vmError(h.name, "snapshot disk", qemuImg(ctx, "snapshot", "-c", tag, path))
	}
	if err := c.freeze(ctx, h); err != nil {
		res.FreezeNote = err.Error()
		c.log.Info("disk snapshot without freezing the guest's file systems: crash-consistent", "vm", h.name, "reason", err)
	} else {
		res.Quiesced = true
		defer func() {
			if err := c.thaw(context.WithoutCancel(ctx), h); err != nil {
				c.log.Error("thaw the guest's file systems after a snapshot", "vm", h.name, "err", err)
			}
		}()
	}
	node, err := c.diskNode(ctx, h, path)
	if err == nil {
		_, err = c.qmp(ctx, h, "blockdev-snapshot-internal-sync", map[string]string{"device": node, "name": tag})
	}
	return res, vmError(h.name, "snapshot disk", err)
}

// RevertDisk sets a stopped VM's disk back to its snapshot tag.
func (c *Conn) RevertDisk(ctx context.Context, uuid, tag string) error {
	h, path, live, err := c.snapshotTarget(ctx, uuid, "restore disk")
	if err != nil {
		return err
	}
	defer h.Free()
	if live {
		return vmError(h.name, "restore disk", ErrDomainRunning)
	}
	return vmError(h.name, "restore disk", qemuImg(ctx, "snapshot", "-a", tag, path))
}

// DeleteDiskSnapshot removes the snapshot tag from a VM's disk; one that
// is not there is no error.
func (c *Conn) DeleteDiskSnapshot(ctx context.Context, uuid, tag string) error {
	h, path, live, err := c.snapshotTarget(ctx, uuid, "delete disk snapshot")
	if err != nil {
		return err
	}
	defer h.Free()
	tags, err := diskSnapshotTags(ctx, path)
	if err != nil || !slices.Contains(tags, tag) {
		return vmError(h.name, "delete disk snapshot", err)
	}
	if !live {
		return vmError(h.name, "delete disk snapshot", qemuImg(ctx, "snapshot", "-d", tag, path))
	}
	node, err := c.diskNode(ctx, h, path)
	if err == nil {
		_, err = c.qmp(ctx, h, "blockdev-snapshot-delete-internal-sync", map[string]string{"device": node, "name": tag})
	}
	return vmError(h.name, "delete disk snapshot", err)
}

// DiskSnapshotTags lists the snapshot tags on a VM's disk.
func (c *Conn) DiskSnapshotTags(ctx context.Context, uuid string) ([]string, error) {
	h, path, _, err := c.snapshotTarget(ctx, uuid, "list disk snapshots")
	if err != nil {
		return nil, err
	}
	defer h.Free()
	tags, err := diskSnapshotTags(ctx, path)
	return tags, vmError(h.name, "list disk snapshots", err)
}

// ThawFS thaws a running VM's file systems: after a gpuvmd that was killed
// between a freeze and its thaw. A guest without an agent, or one not
// running, is no error.
func (c *Conn) ThawFS(ctx context.Context, uuid string) error {
	h, err := c.lookup(ctx, uuid, "thaw file systems")
	if err != nil {
		return err
	}
	defer h.Free()
	if info, err := c.info(ctx, h); err != nil || info.State != StateRunning {
		return err
	}
	if err := c.thaw(ctx, h); err != nil && !agentUnavailable(err) {
		return vmError(h.name, "thaw file systems", err)
	}
	return nil
}

// freeze freezes the guest's file systems through its agent (at most 10 s:
// an agent that does not answer makes the snapshot crash-consistent). A
// freeze that succeeds only after the 10 s, when the snapshot has gone on
// without it, is thawed at once: nothing else would.
func (c *Conn) freeze(ctx context.Context, h *handle) error {
	_, err := call(ctx, c, "freeze file systems", 10*time.Second, func() (struct{}, error) {
		return struct{}{}, h.d.FSFreeze(nil, 0)
	}, func(struct{}) {
		// h is freed by then: the domain is looked up again.
		if err := c.ThawFS(context.WithoutCancel(ctx), h.uuid); err != nil {
			c.log.Error("thaw the guest's file systems after a freeze that came too late", "vm", h.name, "err", err)
		}
	})
	return clean(err)
}

func (c *Conn) thaw(ctx context.Context, h *handle) error {
	_, err := call(ctx, c, "thaw file systems", 30*time.Second, func() (struct{}, error) {
		return struct{}{}, h.d.FSThaw(nil, 0)
	}, nil)
	return clean(err)
}

// qmp runs one QMP command in the domain's QEMU and returns its "return".
func (c *Conn) qmp(ctx context.Context, h *handle, command string, args any) (json.RawMessage, error) {
	req, err := json.Marshal(map[string]any{"execute": command, "arguments": args})
	if err != nil {
		return nil, err
	}
	out, err := call(ctx, c, command, 2*time.Minute, func() (string, error) {
		return h.d.QemuMonitorCommand(string(req), libvirt.DOMAIN_QEMU_MONITOR_COMMAND_DEFAULT)
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", command, clean(err))
	}
	var resp struct {
		Return json.RawMessage `json:"return"`
		Error  *struct {
			Class string `json:"class"`
			Desc  string `json:"desc"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(out), &resp); err != nil {
		return nil, fmt.Errorf("%s: QEMU's answer does not parse: %w", command, err)
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("%s: %s", command, resp.Error.Desc)
	}
	return resp.Return, nil
}

// diskNode is the name of the qcow2 block node QEMU opened path with.
func (c *Conn) diskNode(ctx context.Context, h *handle, path string) (string, error) {
	raw, err := c.qmp(ctx, h, "query-named-block-nodes", map[string]any{"flat": true})
	if err != nil {
		return "", err
	}
	var nodes []struct {
		NodeName string `json:"node-name"`
		Drv      string `json:"drv"`
		File     string `json:"file"`
	}
	if err := json.Unmarshal(raw, &nodes); err != nil {
		return "", fmt.Errorf("query-named-block-nodes: %w", err)
	}
	for _, n := range nodes {
		if n.Drv == "qcow2" && nodeFile(n.File) == path {
			return n.NodeName, nil
		}
	}
	return "", fmt.Errorf("QEMU has no qcow2 node of %s open", path)
}

// nodeFile is the file a block node's filename names. A qcow2 node opened
// as libvirt opens it (-blockdev, its backing given apart) is named by
// QEMU's json: pseudo-protocol, {"driver": "qcow2", "file": {"driver":
// "file", "filename": PATH}, ...} (seen with QEMU 7.2); a plain one by
// its path.
func nodeFile(name string) string {
	rest, ok := strings.CutPrefix(name, "json:")
	if !ok {
		return name
	}
	var j struct {
		File struct {
			Filename string `json:"filename"`
		} `json:"file"`
	}
	if json.Unmarshal([]byte(rest), &j) != nil {
		return ""
	}
	return j.File.Filename
}

// diskSnapshotTags lists the internal snapshots of a qcow2 file (read with
// -U: a running VM holds it open).
func diskSnapshotTags(ctx context.Context, path string) ([]string, error) {
	out, err := qemuImgOut(ctx, "info", "-U", "--output=json", path)
	if err != nil {
		return nil, err
	}
	var info struct {
		Format    string `json:"format"`
		Snapshots []struct {
			Name string `json:"name"`
		} `json:"snapshots"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		return nil, fmt.Errorf("qemu-img info %s: %w", path, err)
	}
	if info.Format != "qcow2" {
		return nil, fmt.Errorf("%s is %s, not qcow2: it cannot hold snapshots", path, info.Format)
	}
	tags := make([]string, 0, len(info.Snapshots))
	for _, s := range info.Snapshots {
		tags = append(tags, s.Name)
	}
	return tags, nil
}

func qemuImg(ctx context.Context, args ...string) error {
	_, err := qemuImgOut(ctx, args...)
	return err
}

// qemuImgOut runs qemu-img (at most 10 minutes) and returns its output;
// its error says what qemu-img wrote to stderr.
func qemuImgOut(ctx context.Context, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, QemuImg, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return nil, fmt.Errorf("qemu-img %s: %s", args[0], msg)
	}
	return out, nil
}
