//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package train

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// lockRunDir takes an exclusive flock(2) on the lock file at path, without
// waiting, and writes this process's id into it. When another open file
// holds the lock, unlock is nil and holder says who ("process 1234").
// flock conflicts between separate open files even within one process,
// and dies with the process, so a crashed run never leaves it held.
func lockRunDir(path string) (unlock func(), holder string, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, "", err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if !errors.Is(err, syscall.EINTR) {
			break
		}
	}
	if errors.Is(err, syscall.EWOULDBLOCK) {
		raw := make([]byte, 32)
		n, _ := f.ReadAt(raw, 0)
		f.Close()
		holder = "another open of " + path
		if pid := strings.TrimSpace(string(raw[:n])); pid != "" {
			holder = "process " + pid + " holds " + path
		}
		return nil, holder, nil
	}
	if err != nil {
		f.Close()
		return nil, "", fmt.Errorf("flock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, "", nil
}
