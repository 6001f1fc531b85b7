//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package train

import (
	"path/filepath"
	"sync"
)

var (
	heldMu sync.Mutex
	held   = map[string]bool{}
)

// lockRunDir keeps two RunDirs of this process off one directory: this
// platform has no flock(2), so two processes are not kept apart.
func lockRunDir(path string) (unlock func(), holder string, err error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, "", err
	}
	heldMu.Lock()
	defer heldMu.Unlock()
	if held[abs] {
		return nil, "another run of this process holds " + path, nil
	}
	held[abs] = true
	return func() {
		heldMu.Lock()
		delete(held, abs)
		heldMu.Unlock()
	}, "", nil
}
