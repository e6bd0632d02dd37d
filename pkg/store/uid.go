package store

import (
	"context"
	"errors"
	"fmt"

	"gorm.io/gorm"
)

// ErrNoFreeUID: every uid of the range is taken.
var ErrNoFreeUID = errors.New("no free uid left in the range")

// takeDirectoryUID makes the directory's uidNumber the user's uid, unless
// it is 0, already the user's, or another user's (then the user keeps the
// one they have, or gets one from the range later, and a warning says why).
func (s *Store) takeDirectoryUID(u *User, uid int64) error {
	if uid <= 0 || (u.UID != nil && *u.UID == uid) {
		return nil
	}
	res := s.db.Model(&User{}).Where("id = ? AND NOT EXISTS (SELECT 1 FROM users o WHERE o.uid = ? AND o.id <> ?)", u.ID, uid, u.ID).
		Update("uid", uid)
	if res.Error != nil {
		return res.Error
	}
	if res.RowsAffected == 0 {
		s.log.Warn("the directory's uidNumber of a user is another user's uid: the user keeps their own", "user", u.Name, "uid_number", uid)
		return nil
	}
	if u.UID != nil {
		s.log.Warn("a user's uid changed to the directory's uidNumber: files of their home owned by the old uid stay so", "user", u.Name, "old_uid", *u.UID, "uid", uid)
	}
	return nil
}

// UserUID returns a user's stable uid: the one they have, or, the first
// time one is needed, the lowest uid from min to max that no user holds,
// assigned to them for good. A range with none left is ErrNoFreeUID.
func (s *Store) UserUID(ctx context.Context, name string, min, max int64) (int64, error) {
	if min < 1 || max < min {
		return 0, fmt.Errorf("uid of user %q: %w: range %d-%d", name, ErrInvalid, min, max)
	}
	var uid int64
	var err error
	// Two gpuvmds of a fleet may pick the same free uid for two users at
	// once: the unique index refuses the second, which tries again.
	for try := 0; try < 3; try++ {
		if err = s.assignUID(ctx, name, min, max, &uid); !errors.Is(err, gorm.ErrDuplicatedKey) {
			break
		}
	}
	if err != nil {
		return 0, wrap(err, nil, "uid of user %q", name)
	}
	return uid, nil
}

// assignUID is one try of UserUID.
func (s *Store) assignUID(ctx context.Context, name string, min, max int64, uid *int64) error {
	return s.Tx(ctx, func(tx *Store) error {
		u, err := tx.getUser(ctx, "name = ?", name)
		if err != nil {
			return err
		}
		if u.UID != nil {
			*uid = *u.UID
			return nil
		}
		if *uid, err = tx.freeUID(ctx, min, max); err != nil {
			return err
		}
		res := tx.db.Model(&User{}).Where("id = ? AND uid IS NULL", u.ID).Update("uid", *uid)
		if res.Error != nil || res.RowsAffected == 1 {
			return res.Error
		}
		// Another gpuvmd gave the user one meanwhile: that one stands.
		u, err = tx.getUser(ctx, "id = ?", u.ID)
		if err != nil {
			return err
		}
		if u.UID == nil {
			return fmt.Errorf("user %q: %w: no uid recorded", name, ErrConflict)
		}
		*uid = *u.UID
		return nil
	})
}

// freeUID is the lowest uid from min to max that no user holds.
func (s *Store) freeUID(ctx context.Context, min, max int64) (int64, error) {
	var taken []int64
	err := s.db.WithContext(ctx).Model(&User{}).Where("uid BETWEEN ? AND ?", min, max).Order("uid").Pluck("uid", &taken).Error
	if err != nil && !errors.Is(err, gorm.ErrRecordNotFound) {
		return 0, err
	}
	next := min
	for _, t := range taken {
		if t != next {
			break
		}
		next++
	}
	if next > max {
		return 0, fmt.Errorf("%w (%d-%d)", ErrNoFreeUID, min, max)
	}
	return next, nil
}
