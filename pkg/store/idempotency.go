package store

import (
	"context"
	"fmt"
	"time"
)

// PutIdempotencyKey remembers a request sent with an Idempotency-Key. A key
// the user already used is ErrIdempotencyKeyUsed. (CreateVM stores its key
// itself, in its own transaction.)
func (s *Store) PutIdempotencyKey(ctx context.Context, k *IdempotencyKey) error {
	err := s.Tx(ctx, func(tx *Store) error { return tx.putIdempotencyKey(k) })
	return wrap(err, ErrIdempotencyKeyUsed, "put idempotency key of %q", k.User)
}

func (s *Store) putIdempotencyKey(k *IdempotencyKey) error {
	if k.User == "" || k.Key == "" || k.RequestHash == "" {
		return fmt.Errorf("%w: idempotency key needs a user, a key and a request hash", ErrInvalid)
	}
	k.CreatedAt = s.clock()
	return s.insert(k, func(err error) error { return wrap(err, ErrIdempotencyKeyUsed, "insert idempotency key") })
}

// GetIdempotencyKey finds what a user's earlier request with this key did.
func (s *Store) GetIdempotencyKey(ctx context.Context, user, key string) (*IdempotencyKey, error) {
	var k IdempotencyKey
	err := s.db.WithContext(ctx).Where("user_name = ? AND idempotency_key = ?", user, key).Take(&k).Error
	if err != nil {
		return nil, wrap(err, nil, "get idempotency key of %q", user)
	}
	return &k, nil
}

// DeleteIdempotencyKeysBefore forgets keys older than t and says how many.
func (s *Store) DeleteIdempotencyKeysBefore(ctx context.Context, t time.Time) (int64, error) {
	res := s.db.WithContext(ctx).Where("created_at < ?", t.UTC()).Delete(&IdempotencyKey{})
	return res.RowsAffected, wrap(res.Error, nil, "delete idempotency keys before %s", t.UTC().Format(time.RFC3339))
}
