// Package rfb is the part of the remote framebuffer protocol (RFB, RFC 6143:
// VNC) that gpuvm speaks: the version and security handshake on both sides,
// with VNC authentication's DES challenge-response. What follows the
// handshake (ClientInit, ServerInit, framebuffer updates) is the caller's.
package rfb

import (
	"crypto/des"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"strings"
)

// Security types gpuvm speaks.
const (
	SecNone    = 1
	SecVNCAuth = 2
)

// ErrAuthFailed says the server refused the password.
var ErrAuthFailed = errors.New("the password was refused")

// ParseVersion parses "RFB 003.008\n" into its minor version 3, 7 or 8; an
// unknown minor version counts as 3.3, as RFC 6143 says.
func ParseVersion(b []byte) (minor int, err error) {
	var major int
	if _, err := fmt.Sscanf(string(b), "RFB %03d.%03d\n", &major, &minor); err != nil || major != 3 {
		return 0, fmt.Errorf("not an RFB 3.x protocol version: %q", b)
	}
	switch {
	case minor >= 8:
		return 8, nil
	case minor == 7:
		return 7, nil
	}
	return 3, nil
}

// Authenticate is the client side of the handshake, up to the security
// result: version (the server's, up to 3.8), security type (VNC
// authentication with password, or none when password is empty and the
// server offers it). It returns the minor version agreed on. After it the
// server waits for ClientInit. A refused password is ErrAuthFailed.
func Authenticate(conn io.ReadWriter, password string) (minor int, err error) {
	buf := make([]byte, 12)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return 0, fmt.Errorf("read its protocol version: %w", err)
	}
	if minor, err = ParseVersion(buf); err != nil {
		return 0, err
	}
	if _, err := fmt.Fprintf(conn, "RFB 003.%03d\n", minor); err != nil {
		return 0, err
	}
	chosen, err := chooseSecurity(conn, minor, password)
	if err != nil {
		return 0, err
	}
	switch chosen {
	case SecNone:
		if minor < 8 {
			return minor, nil // no security result for None before 3.8
		}
	case SecVNCAuth:
		if password == "" {
			return 0, errors.New("it asks for a password and the VM has none recorded")
		}
		var challenge [16]byte
		if _, err := io.ReadFull(conn, challenge[:]); err != nil {
			return 0, fmt.Errorf("read its challenge: %w", err)
		}
		resp := AuthResponse(password, challenge)
		if _, err := conn.Write(resp[:]); err != nil {
			return 0, err
		}
	default:
		return 0, fmt.Errorf("it chose security type %d, which gpuvmd does not speak", chosen)
	}
	var result uint32
	if err := binary.Read(conn, binary.BigEndian, &result); err != nil {
		return 0, fmt.Errorf("read its security result: %w", err)
	}
	if result != 0 {
		if minor == 8 {
			return 0, fmt.Errorf("%w: %s", ErrAuthFailed, Reason(conn))
		}
		return 0, ErrAuthFailed
	}
	return minor, nil
}

// chooseSecurity reads the security types the server offers (3.3: the one
// it chose) and answers with the one the client takes.
func chooseSecurity(conn io.ReadWriter, minor int, password string) (uint32, error) {
	var chosen uint32
	if minor == 3 {
		if err := binary.Read(conn, binary.BigEndian, &chosen); err != nil {
			return 0, fmt.Errorf("read its security type: %w", err)
		}
		if chosen == 0 {
			return 0, fmt.Errorf("it refused the connection: %s", Reason(conn))
		}
		return chosen, nil
	}
	var n [1]byte
	if _, err := io.ReadFull(conn, n[:]); err != nil {
		return 0, fmt.Errorf("read its security types: %w", err)
	}
	if n[0] == 0 {
		return 0, fmt.Errorf("it refused the connection: %s", Reason(conn))
	}
	types := make([]byte, n[0])
	if _, err := io.ReadFull(conn, types); err != nil {
		return 0, fmt.Errorf("read its security types: %w", err)
	}
	for _, t := range types {
		if t == SecVNCAuth && password != "" || t == SecNone && chosen == 0 {
			chosen = uint32(t)
		}
	}
	if chosen == 0 {
		return 0, fmt.Errorf("it offers security types %v, gpuvmd speaks none (1) and VNC authentication (2)", types)
	}
	if _, err := conn.Write([]byte{byte(chosen)}); err != nil {
		return 0, err
	}
	return chosen, nil
}

// ServeNoAuth is the server side of the handshake with a client that the
// caller has authenticated otherwise: version 3.8 (or the client's older
// one) and security type None. Each Write of conn is one message of the
// handshake. What the client sends after it (ClientInit) is left unread.
func ServeNoAuth(conn io.ReadWriter) error {
	if _, err := conn.Write([]byte("RFB 003.008\n")); err != nil {
		return err
	}
	buf := make([]byte, 12)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return fmt.Errorf("read the client's version: %w", err)
	}
	minor, err := ParseVersion(buf)
	if err != nil {
		return err
	}
	if minor == 3 {
		_, err := conn.Write([]byte{0, 0, 0, SecNone})
		return err
	}
	if _, err := conn.Write([]byte{1, SecNone}); err != nil {
		return err
	}
	var chosen [1]byte
	if _, err := io.ReadFull(conn, chosen[:]); err != nil {
		return fmt.Errorf("read the client's security type: %w", err)
	}
	if chosen[0] != SecNone {
		msg := "gpuvmd offers security type None only"
		if minor == 8 {
			_, _ = conn.Write(binary.BigEndian.AppendUint32(binary.BigEndian.AppendUint32(nil, 1), uint32(len(msg))))
			_, _ = conn.Write([]byte(msg))
		}
		return fmt.Errorf("the client chose security type %d: %s", chosen[0], msg)
	}
	if minor == 8 {
		_, err := conn.Write([]byte{0, 0, 0, 0})
		return err
	}
	return nil
}

// ServeVNCAuth is a display's side of the handshake with VNC
// authentication, as QEMU's: version 3.8, security type VNC authentication
// with challenge, and the security result. A wrong response is answered
// with "Authentication failed" and returned as ErrAuthFailed. After it the
// display reads ClientInit. gpuvm's own displays are QEMU's; this side
// stands in for them where there is none.
func ServeVNCAuth(conn io.ReadWriter, password string, challenge [16]byte) error {
	if _, err := conn.Write([]byte("RFB 003.008\n")); err != nil {
		return err
	}
	buf := make([]byte, 12)
	if _, err := io.ReadFull(conn, buf); err != nil {
		return fmt.Errorf("read the client's version: %w", err)
	}
	minor, err := ParseVersion(buf)
	if err != nil {
		return err
	}
	if minor == 3 {
		if _, err := conn.Write([]byte{0, 0, 0, SecVNCAuth}); err != nil {
			return err
		}
	} else {
		if _, err := conn.Write([]byte{1, SecVNCAuth}); err != nil {
			return err
		}
		var chosen [1]byte
		if _, err := io.ReadFull(conn, chosen[:]); err != nil {
			return fmt.Errorf("read the client's security type: %w", err)
		}
		if chosen[0] != SecVNCAuth {
			return fmt.Errorf("the client chose security type %d, not VNC authentication", chosen[0])
		}
	}
	if _, err := conn.Write(challenge[:]); err != nil {
		return err
	}
	var resp [16]byte
	if _, err := io.ReadFull(conn, resp[:]); err != nil {
		return fmt.Errorf("read the client's response: %w", err)
	}
	if resp != AuthResponse(password, challenge) {
		const msg = "Authentication failed"
		result := binary.BigEndian.AppendUint32(nil, 1)
		if minor == 8 {
			result = append(binary.BigEndian.AppendUint32(result, uint32(len(msg))), msg...)
		}
		_, _ = conn.Write(result)
		return fmt.Errorf("%w: %s", ErrAuthFailed, msg)
	}
	_, err = conn.Write([]byte{0, 0, 0, 0})
	return err
}

// Reason reads the reason string of a refusal (a length, then the text).
func Reason(r io.Reader) string {
	var n uint32
	if err := binary.Read(r, binary.BigEndian, &n); err != nil || n > 4096 {
		return "no reason given"
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return "no reason given"
	}
	return strings.TrimSpace(string(b))
}

// AuthResponse encrypts a VNC authentication challenge with the password:
// DES in ECB mode keyed with the password's first 8 bytes (zero-padded),
// each byte's bits reversed (the protocol's historical quirk).
func AuthResponse(password string, challenge [16]byte) [16]byte {
	key := make([]byte, 8)
	copy(key, password)
	for i, b := range key {
		key[i] = bits.Reverse8(b)
	}
	block, _ := des.NewCipher(key) // an 8-byte key never fails
	var out [16]byte
	block.Encrypt(out[:8], challenge[:8])
	block.Encrypt(out[8:], challenge[8:])
	return out
}
