package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// ErrNoCapacity: the GPUs cannot honour a booking then (409); the
// Problem's detail says when, what and how much fits.
var ErrNoCapacity error = kindError{"no-capacity", http.StatusConflict}

// IsNoCapacity: a booking the GPUs cannot honour (ErrNoCapacity).
func IsNoCapacity(err error) bool { return errors.Is(err, ErrNoCapacity) }

// CreateReservation books GPU capacity ahead. A booking the GPUs cannot
// honour then is refused with ErrNoCapacity; one the rules refuse with a
// validation Problem naming the field.
func (c *Client) CreateReservation(ctx context.Context, req api.CreateReservationRequest) (*api.Reservation, error) {
	var out api.Reservation
	if err := c.do(ctx, http.MethodPost, "/v1/reservations", nil, nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListReservationsOptions select the reservations ListReservations
// returns; zero values take the server's defaults (those not over yet, of
// every owner the caller may see).
type ListReservationsOptions struct {
	// From keeps the reservations with an occurrence that ends after it;
	// To those whose first occurrence starts before it.
	From, To time.Time
	// Owner keeps one owner's: a user, or "group:NAME".
	Owner string
}

// ListReservations lists the reservations the caller may see (their own,
// their groups', those they made; admins all), by start.
func (c *Client) ListReservations(ctx context.Context, o ListReservationsOptions) ([]api.Reservation, error) {
	q := url.Values{}
	if !o.From.IsZero() {
		q.Set("from", o.From.Format(time.RFC3339))
	}
	if !o.To.IsZero() {
		q.Set("to", o.To.Format(time.RFC3339))
	}
	if o.Owner != "" {
		q.Set("owner", o.Owner)
	}
	var out api.ReservationList
	if err := c.do(ctx, http.MethodGet, "/v1/reservations", q, nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// GetReservation gets one reservation; one the caller may not see is not
// found.
func (c *Client) GetReservation(ctx context.Context, id int64) (*api.Reservation, error) {
	var out api.Reservation
	if err := c.do(ctx, http.MethodGet, "/v1/reservations/"+strconv.FormatInt(id, 10), nil, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CancelReservation cancels a reservation (its owner, who booked it, or an
// admin).
func (c *Client) CancelReservation(ctx context.Context, id int64) error {
	return c.do(ctx, http.MethodDelete, "/v1/reservations/"+strconv.FormatInt(id, 10), nil, nil, nil, nil)
}

// ReservationCapacity counts, per slot of step (0: an hour) from from to
// to (zero: the server's defaults, a week from now), how many VMs of a
// profile a booking could get, with the caller's booking rules.
func (c *Client) ReservationCapacity(ctx context.Context, profile string, from, to time.Time, step time.Duration) (*api.ReservationCapacity, error) {
	q := url.Values{"profile": {profile}}
	if !from.IsZero() {
		q.Set("from", from.Format(time.RFC3339))
	}
	if !to.IsZero() {
		q.Set("to", to.Format(time.RFC3339))
	}
	if step > 0 {
		q.Set("step", step.String())
	}
	var out api.ReservationCapacity
	if err := c.do(ctx, http.MethodGet, "/v1/reservations/capacity", q, nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
