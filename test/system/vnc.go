// Package system holds gpuvm's end-to-end tests against a real libvirtd and
// QEMU (system_test.go), and the small VNC client they check consoles with.
package system

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/gpuvm/gpuvm/pkg/rfb"
)

// FrameInfo is what a VNC server told a client: its desktop, and the first
// framebuffer update.
type FrameInfo struct {
	Version       string // "RFB 003.008"
	Width, Height int
	BitsPerPixel  int
	Name          string
	Rects         int   // rectangles in the first FramebufferUpdate
	PixelBytes    int64 // raw pixel bytes received
}

// ErrAuthFailed says the server refused the password.
var ErrAuthFailed = rfb.ErrAuthFailed

// VNCFrame connects to a VNC server, authenticates with VNC authentication
// (pkg/rfb) when it asks for it, completes the RFB handshake
// (version, security, ClientInit, ServerInit), asks for a full framebuffer
// update in raw encoding and reads it (RFC 6143).
func VNCFrame(ctx context.Context, addr, password string) (FrameInfo, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return FrameInfo{}, err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	}
	return rfbSession(conn, password)
}

func rfbSession(conn io.ReadWriter, password string) (FrameInfo, error) {
	var fi FrameInfo
	minor, err := rfb.Authenticate(conn, password)
	if err != nil {
		return fi, err
	}
	fi.Version = fmt.Sprintf("RFB 003.%03d", minor)

	// ClientInit (shared) and ServerInit.
	if _, err := conn.Write([]byte{1}); err != nil {
		return fi, err
	}
	var si struct {
		Width, Height uint16
		PixelFormat   [16]byte
		NameLength    uint32
	}
	if err := binary.Read(conn, binary.BigEndian, &si); err != nil {
		return fi, fmt.Errorf("read ServerInit: %w", err)
	}
	if si.NameLength > 1<<16 {
		return fi, fmt.Errorf("ServerInit: name of %d bytes", si.NameLength)
	}
	name := make([]byte, si.NameLength)
	if _, err := io.ReadFull(conn, name); err != nil {
		return fi, err
	}
	fi.Width, fi.Height, fi.Name = int(si.Width), int(si.Height), string(name)
	fi.BitsPerPixel = int(si.PixelFormat[0])
	if fi.Width == 0 || fi.Height == 0 || fi.BitsPerPixel%8 != 0 || fi.BitsPerPixel == 0 {
		return fi, fmt.Errorf("ServerInit: %dx%d at %d bits per pixel", fi.Width, fi.Height, fi.BitsPerPixel)
	}

	// SetEncodings: raw only, so the update's size is known.
	if _, err := conn.Write([]byte{2, 0, 0, 1, 0, 0, 0, 0}); err != nil {
		return fi, err
	}
	// FramebufferUpdateRequest, not incremental, the whole screen.
	req := []byte{3, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	binary.BigEndian.PutUint16(req[6:], si.Width)
	binary.BigEndian.PutUint16(req[8:], si.Height)
	if _, err := conn.Write(req); err != nil {
		return fi, err
	}
	for {
		var typ [1]byte
		if _, err := io.ReadFull(conn, typ[:]); err != nil {
			return fi, fmt.Errorf("read server message: %w", err)
		}
		switch typ[0] {
		case 0: // FramebufferUpdate
			var hdr struct {
				Pad   byte
				Rects uint16
			}
			if err := binary.Read(conn, binary.BigEndian, &hdr); err != nil {
				return fi, err
			}
			fi.Rects = int(hdr.Rects)
			for i := 0; i < fi.Rects; i++ {
				var r struct {
					X, Y, W, H uint16
					Encoding   int32
				}
				if err := binary.Read(conn, binary.BigEndian, &r); err != nil {
					return fi, fmt.Errorf("rectangle %d: %w", i, err)
				}
				if r.Encoding != 0 {
					return fi, fmt.Errorf("rectangle %d: encoding %d, asked for raw only", i, r.Encoding)
				}
				size := int64(r.W) * int64(r.H) * int64(fi.BitsPerPixel/8)
				got, err := io.CopyN(io.Discard, conn, size)
				fi.PixelBytes += got
				if err != nil {
					return fi, fmt.Errorf("rectangle %d pixels: %w", i, err)
				}
			}
			return fi, nil
		case 2: // Bell
		case 3: // ServerCutText
			var hdr struct {
				Pad    [3]byte
				Length uint32
			}
			if err := binary.Read(conn, binary.BigEndian, &hdr); err != nil {
				return fi, err
			}
			if _, err := io.CopyN(io.Discard, conn, int64(hdr.Length)); err != nil {
				return fi, err
			}
		default:
			return fi, fmt.Errorf("unexpected server message type %d before the framebuffer update", typ[0])
		}
	}
}
