package backup

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"time"
)

// Scheduled archives are named gpuvm-backup-YYYYMMDDTHHMMSSZ.tar.gz (UTC):
// the names sort as the times, and pruning touches no other name.
const (
	namePrefix = "gpuvm-backup-"
	nameSuffix = ".tar.gz"
	nameLayout = "20060102T150405Z"
)

var scheduledRE = regexp.MustCompile(`^gpuvm-backup-(\d{8}T\d{6}Z)\.tar\.gz$`)

// ScheduledName is the name of the scheduled archive made at t.
func ScheduledName(t time.Time) string {
	return namePrefix + t.UTC().Format(nameLayout) + nameSuffix
}

// Scheduled is an archive of the schedule in a directory.
type Scheduled struct {
	Name string
	Time time.Time
}

// ListScheduled lists the scheduled archives in dir, oldest first: regular
// files whose name is ScheduledName's, nothing else. A missing dir has none.
func ListScheduled(dir string) ([]Scheduled, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list backups in %s: %w", dir, err)
	}
	var out []Scheduled
	for _, e := range entries {
		m := scheduledRE.FindStringSubmatch(e.Name())
		if m == nil || !e.Type().IsRegular() {
			continue
		}
		t, err := time.Parse(nameLayout, m[1])
		if err != nil {
			continue // 20261399T…: not a name ScheduledName makes
		}
		out = append(out, Scheduled{Name: e.Name(), Time: t})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Time.Before(out[j].Time) })
	return out, nil
}

// Prune deletes the oldest scheduled archives of dir beyond the newest
// keep, and returns the names it deleted. Files of other names are never
// touched.
func Prune(dir string, keep int) ([]string, error) {
	if keep < 1 {
		return nil, fmt.Errorf("prune backups in %s: keep must be at least 1, not %d", dir, keep)
	}
	list, err := ListScheduled(dir)
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for len(list) > keep {
		name := list[0].Name
		list = list[1:]
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			errs = append(errs, fmt.Errorf("prune backups: %w", err))
			continue
		}
		removed = append(removed, name)
	}
	return removed, errors.Join(errs...)
}

// NextRun is when the next scheduled backup is due: every after the newest
// archive in dir, or now when there is none or that time has passed. So a
// gpuvmd restarted more often than every still backs up.
func NextRun(dir string, every time.Duration, now time.Time) (time.Time, error) {
	list, err := ListScheduled(dir)
	if err != nil || len(list) == 0 {
		return now, err
	}
	next := list[len(list)-1].Time.Add(every)
	if next.Before(now) {
		return now, nil
	}
	if max := now.Add(every); next.After(max) { // an archive from the future: the clock went back
		return max, nil
	}
	return next, nil
}
