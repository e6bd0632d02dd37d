package system

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"

	"github.com/gpuvm/gpuvm/pkg/rfb"
)

// fakeServer speaks the server side of RFB 3.8 with VNC authentication.
func fakeServer(t *testing.T, conn net.Conn, password string, w, h uint16) {
	t.Helper()
	defer conn.Close()
	be := binary.BigEndian
	if rfb.ServeVNCAuth(conn, password, [16]byte([]byte("0123456789abcdef"))) != nil {
		return
	}
	var shared [1]byte
	_, _ = io.ReadFull(conn, shared[:])
	pf := [16]byte{32, 24, 0, 1}
	name := "fake"
	_ = binary.Write(conn, be, struct {
		W, H uint16
		PF   [16]byte
		N    uint32
	}{w, h, pf, uint32(len(name))})
	_, _ = conn.Write([]byte(name))
	msgs := make([]byte, 8+10) // SetEncodings with one encoding, FramebufferUpdateRequest
	_, _ = io.ReadFull(conn, msgs)
	// A ServerCutText first, then the update in one raw rectangle.
	_, _ = conn.Write([]byte{3, 0, 0, 0, 0, 0, 0, 2, 'h', 'i'})
	_, _ = conn.Write([]byte{0, 0, 0, 1})
	_ = binary.Write(conn, be, struct {
		X, Y, W, H uint16
		E          int32
	}{0, 0, w, h, 0})
	_, _ = conn.Write(make([]byte, int(w)*int(h)*4))
}

func TestRFBSession(t *testing.T) {
	tests := []struct {
		name, server, client string
		wantErr              error
	}{
		{"good password", "s3cret!x", "s3cret!x", nil},
		{"wrong password", "s3cret!x", "guess", ErrAuthFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, s := net.Pipe()
			go fakeServer(t, s, tt.server, 64, 48)
			defer c.Close()
			fi, err := rfbSession(c, tt.client)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("err = %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if fi.Width != 64 || fi.Height != 48 || fi.BitsPerPixel != 32 || fi.Name != "fake" || fi.Rects != 1 || fi.PixelBytes != 64*48*4 {
				t.Errorf("frame info %+v", fi)
			}
		})
	}
}
