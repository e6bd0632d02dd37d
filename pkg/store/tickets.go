package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// TicketPrefix starts every console and tunnel ticket, so that people and
// secret scanners can tell one from other tokens.
const TicketPrefix = "gvt_"

// Errors of ConsumeTicket; each matches ErrInvalidTicket. Their text is
// meant for the person holding the ticket.
var (
	// ErrInvalidTicket: the ticket cannot be used.
	ErrInvalidTicket = errors.New("invalid ticket")
	// ErrTicketUnknown: no such ticket (never issued, mistyped, or its
	// VM is gone).
	ErrTicketUnknown = fmt.Errorf("%w: the ticket is unknown", ErrInvalidTicket)
	// ErrTicketUsed: the ticket was used already; a ticket serves one
	// connection.
	ErrTicketUsed = fmt.Errorf("%w: the ticket was already used (a ticket serves one connection)", ErrInvalidTicket)
	// ErrTicketExpired: the ticket's time ran out before it was used.
	ErrTicketExpired = fmt.Errorf("%w: the ticket has expired", ErrInvalidTicket)
)

// TicketID is the ID a ticket is stored under: the hex SHA-256 of it.
func TicketID(plain string) string {
	sum := sha256.Sum256([]byte(plain))
	return hex.EncodeToString(sum[:])
}

// IssueTicket stores a new one-time ticket to a VM's display (Kind
// TicketConsole, Port 0) or to a port of its guest (TicketTunnel, Port
// 1–65535, Protocol ProtocolTCP or ProtocolUDP; empty is tcp) for t.User,
// valid for ttl, and returns the ticket itself: only its SHA-256 is kept. It
// fills t's ID, CreatedAt and ExpiresAt (and an empty Protocol). An unknown
// VM is ErrNotFound.
func (s *Store) IssueTicket(ctx context.Context, t *ConsoleTicket, ttl time.Duration) (string, error) {
	if t.Protocol == "" {
		t.Protocol = ProtocolTCP
	}
	switch {
	case t.VMID == "" || t.User == "":
		return "", fmt.Errorf("issue ticket: %w: vm and user are required", ErrInvalid)
	case ttl <= 0:
		return "", fmt.Errorf("issue ticket: %w: the validity must be positive, not %v", ErrInvalid, ttl)
	case t.Kind == TicketConsole && t.Port != 0:
		return "", fmt.Errorf("issue ticket: %w: a console ticket has no port", ErrInvalid)
	case t.Kind == TicketTunnel && (t.Port < 1 || t.Port > 65535):
		return "", fmt.Errorf("issue ticket: %w: port %d is not between 1 and 65535", ErrInvalid, t.Port)
	case t.Kind != TicketConsole && t.Kind != TicketTunnel:
		return "", fmt.Errorf("issue ticket: %w: kind %q is neither %q nor %q", ErrInvalid, t.Kind, TicketConsole, TicketTunnel)
	case t.Protocol != ProtocolTCP && t.Protocol != ProtocolUDP:
		return "", fmt.Errorf("issue ticket: %w: protocol %q is neither %q nor %q", ErrInvalid, t.Protocol, ProtocolTCP, ProtocolUDP)
	case t.Kind == TicketConsole && t.Protocol != ProtocolTCP:
		return "", fmt.Errorf("issue ticket: %w: a console ticket is tcp", ErrInvalid)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("issue ticket: %w", err)
	}
	plain := TicketPrefix + base64.RawURLEncoding.EncodeToString(b[:])
	now := s.clock()
	t.ID, t.CreatedAt, t.ExpiresAt, t.UsedAt = TicketID(plain), now, now.Add(ttl).Truncate(time.Microsecond), nil
	if err := s.db.WithContext(ctx).Create(t).Error; err != nil {
		return "", wrap(err, nil, "issue %s ticket for vm %s", t.Kind, t.VMID)
	}
	return plain, nil
}

// ConsumeTicket spends a ticket and returns it: a ticket is used once, by
// one statement that marks it used only when it is unused and unexpired, so
// that of two concurrent uses exactly one wins. A ticket used before is
// ErrTicketUsed, one past its time ErrTicketExpired, one never issued (or
// whose VM is gone) ErrTicketUnknown; all match ErrInvalidTicket.
func (s *Store) ConsumeTicket(ctx context.Context, plain string) (*ConsoleTicket, error) {
	if !strings.HasPrefix(plain, TicketPrefix) {
		return nil, fmt.Errorf("consume ticket: %w", ErrTicketUnknown)
	}
	id := TicketID(plain)
	now := s.clock()
	res := s.db.WithContext(ctx).Model(&ConsoleTicket{}).
		Where("id = ? AND used_at IS NULL AND expires_at > ?", id, now).
		Update("used_at", now)
	if res.Error != nil {
		return nil, wrap(res.Error, nil, "consume ticket")
	}
	var t ConsoleTicket
	if err := s.db.WithContext(ctx).Where("id = ?", id).Take(&t).Error; err != nil {
		err = wrap(err, nil, "consume ticket")
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("consume ticket: %w", ErrTicketUnknown)
		}
		return nil, err
	}
	if res.RowsAffected == 1 {
		return &t, nil
	}
	if t.UsedAt != nil {
		return nil, fmt.Errorf("consume ticket for vm %s: %w", t.VMID, ErrTicketUsed)
	}
	return nil, fmt.Errorf("consume ticket for vm %s (expired %s): %w", t.VMID, t.ExpiresAt.Format(time.RFC3339), ErrTicketExpired)
}

// PeekTicket says whether a ticket could be used now, without spending it:
// the browser console page checks the ticket it was opened with before it
// loads, and the websocket that the page opens spends it. Its errors are
// ConsumeTicket's.
func (s *Store) PeekTicket(ctx context.Context, plain string) (*ConsoleTicket, error) {
	if !strings.HasPrefix(plain, TicketPrefix) {
		return nil, fmt.Errorf("check ticket: %w", ErrTicketUnknown)
	}
	var t ConsoleTicket
	err := s.db.WithContext(ctx).Where("id = ?", TicketID(plain)).Take(&t).Error
	switch err = wrap(err, nil, "check ticket"); {
	case errors.Is(err, ErrNotFound):
		return nil, fmt.Errorf("check ticket: %w", ErrTicketUnknown)
	case err != nil:
		return nil, err
	case t.UsedAt != nil:
		return nil, fmt.Errorf("check ticket for vm %s: %w", t.VMID, ErrTicketUsed)
	case !t.ExpiresAt.After(s.clock()):
		return nil, fmt.Errorf("check ticket for vm %s: %w", t.VMID, ErrTicketExpired)
	}
	return &t, nil
}

// DeleteExpiredTickets removes the tickets that expired before t, used or
// not, and says how many.
func (s *Store) DeleteExpiredTickets(ctx context.Context, t time.Time) (int64, error) {
	res := s.db.WithContext(ctx).Where("expires_at < ?", t.UTC()).Delete(&ConsoleTicket{})
	if res.Error != nil {
		return 0, wrap(res.Error, nil, "delete expired tickets")
	}
	return res.RowsAffected, nil
}
