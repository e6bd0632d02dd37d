package images

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"
)

// The formats an image may have: what qemu-img reads, and an ISO 9660
// filesystem (which qemu-img calls raw) told apart by its signature.
const (
	FormatQCOW2 = "qcow2"
	FormatRaw   = "raw"
	FormatISO   = "iso"
)

// qemuInfo is what `qemu-img info --output=json` says of a file.
type qemuInfo struct {
	Format          string `json:"format"`
	VirtualSize     int64  `json:"virtual-size"`
	ActualSize      int64  `json:"actual-size"`
	BackingFilename string `json:"backing-filename"`
	Encrypted       bool   `json:"encrypted"`
}

// info runs qemu-img info on path. -U reads a file another process holds
// open (a stopped VM's disk is not, but a source may be).
func (m *Manager) info(ctx context.Context, path string) (qemuInfo, error) {
	bin := m.QemuImg
	if bin == "" {
		bin = "qemu-img"
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, "info", "-U", "--output=json", path)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if msg == "" {
			msg = err.Error()
		}
		return qemuInfo{}, invalidf("qemu-img info %s: %s", path, msg)
	}
	var qi qemuInfo
	if err := json.Unmarshal(out, &qi); err != nil {
		return qemuInfo{}, fmt.Errorf("reading qemu-img info of %s: %w", path, err)
	}
	return qi, nil
}

// imageFormat is the image format of a file qemu-img described: qcow2
// without a backing file or encryption, raw, or an ISO. Anything else is
// ErrInvalid.
func imageFormat(qi qemuInfo, path string) (string, error) {
	switch {
	case qi.Format == FormatQCOW2 && qi.BackingFilename != "":
		return "", invalidf("%s is a qcow2 overlay on %s; import a standalone image (qemu-img convert it first)", path, qi.BackingFilename)
	case qi.Encrypted:
		return "", invalidf("%s is encrypted", path)
	case qi.Format == FormatQCOW2:
		return FormatQCOW2, nil
	case qi.Format == FormatRaw:
		iso, err := isISO(path)
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", path, err)
		}
		if iso {
			return FormatISO, nil
		}
		return FormatRaw, nil
	default:
		return "", invalidf("%s is in format %q; gpuvm takes qcow2, raw or an ISO (qemu-img convert -O qcow2 it first)", path, qi.Format)
	}
}

// isISO reports whether a file has an ISO 9660 primary volume descriptor:
// "CD001" at byte 32769.
func isISO(path string) (bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	var sig [5]byte
	if _, err := f.ReadAt(sig[:], 32769); err == io.EOF {
		return false, nil
	} else if err != nil {
		return false, err
	}
	return string(sig[:]) == "CD001", nil
}
