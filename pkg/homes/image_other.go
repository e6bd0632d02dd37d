//go:build !linux

package homes

import "errors"

var errNotLinux = errors.New("image homes are Linux's")

func sharedFS(string) (string, bool) { return "", false }

func fsUsage(string) (used, capacity uint64, err error) { return 0, 0, errNotLinux }
