package rfb

import (
	"bytes"
	"crypto/des"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
)

func TestAuthResponse(t *testing.T) {
	challenge := [16]byte(bytes.Repeat([]byte{0x5a}, 16))
	// 'a' = 0x61 = 0b01100001, bit-reversed 0b10000110 = 0x86; padded with zeros.
	block, _ := des.NewCipher([]byte{0x86, 0, 0, 0, 0, 0, 0, 0})
	var want [16]byte
	block.Encrypt(want[:8], challenge[:8])
	block.Encrypt(want[8:], challenge[8:])
	if got := AuthResponse("a", challenge); got != want {
		t.Errorf("response % x, want % x", got, want)
	}
	if AuthResponse("12345678", challenge) != AuthResponse("123456789", challenge) {
		t.Error("characters after the eighth changed the response")
	}
	if AuthResponse("12345678", challenge) == AuthResponse("12345679", challenge) {
		t.Error("the eighth character did not change the response")
	}
}

func TestParseVersion(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    int
		wantErr bool
	}{
		{"RFB 003.008\n", 8, false},
		{"RFB 003.007\n", 7, false},
		{"RFB 003.003\n", 3, false},
		{"RFB 003.005\n", 3, false}, // unknown minor: 3.3
		{"RFB 003.889\n", 8, false}, // Apple's
		{"RFB 004.001\n", 0, true},
		{"HTTP/1.1 200", 0, true},
	} {
		got, err := ParseVersion([]byte(tc.in))
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("ParseVersion(%q) = %d, %v; want %d, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestAuthenticate(t *testing.T) {
	for _, tc := range []struct {
		name, server, client string
		wantErr              error
	}{
		{"good password", "s3cret!x", "s3cret!x", nil},
		{"wrong password", "s3cret!x", "guess", ErrAuthFailed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := net.Pipe()
			defer c.Close()
			served := make(chan error, 1)
			go func() {
				defer s.Close()
				served <- ServeVNCAuth(s, tc.server, [16]byte([]byte("0123456789abcdef")))
			}()
			minor, err := Authenticate(c, tc.client)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if err == nil && minor != 8 {
				t.Errorf("minor version %d, want 8", minor)
			}
			if err != nil && err.Error() != "the password was refused: Authentication failed" {
				t.Errorf("err = %q, want the server's reason", err)
			}
			if serr := <-served; !errors.Is(serr, tc.wantErr) {
				t.Errorf("ServeVNCAuth: %v, want %v", serr, tc.wantErr)
			}
		})
	}
}

// TestServeNoAuth: the two halves agree — a client with no password
// completes the handshake with a server that offers None.
func TestServeNoAuth(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	done := make(chan error, 1)
	go func() { defer s.Close(); done <- ServeNoAuth(s) }()
	minor, err := Authenticate(c, "")
	if err != nil || minor != 8 {
		t.Fatalf("Authenticate = %d, %v; want 8, nil", minor, err)
	}
	if err := <-done; err != nil {
		t.Fatalf("ServeNoAuth: %v", err)
	}
}

// A client that insists on VNC authentication is told why it is refused.
func TestServeNoAuthRefusesOtherTypes(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	done := make(chan error, 1)
	go func() { defer s.Close(); done <- ServeNoAuth(s) }()
	buf := make([]byte, 12)
	_, _ = io.ReadFull(c, buf)
	_, _ = c.Write([]byte("RFB 003.008\n"))
	types := make([]byte, 2)
	_, _ = io.ReadFull(c, types)
	_, _ = c.Write([]byte{SecVNCAuth})
	var result uint32
	_ = binary.Read(c, binary.BigEndian, &result)
	if reason := Reason(c); result != 1 || reason != "gpuvmd offers security type None only" {
		t.Errorf("result %d, reason %q", result, reason)
	}
	if err := <-done; err == nil {
		t.Error("ServeNoAuth accepted security type 2")
	}
}
