//go:build !unix

package train

import (
	"fmt"
	"io"
	"os"
)

// mapFile reads the whole of f into memory: the fallback where the
// platform has no syscall.Mmap (the data set must then fit in RAM).
func mapFile(f *os.File, size int64) (data []byte, release func() error, err error) {
	if int64(int(size)) != size {
		return nil, nil, fmt.Errorf("file of %d bytes does not fit the address space", size)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(io.NewSectionReader(f, 0, size), b); err != nil {
		return nil, nil, fmt.Errorf("reading: %w", err)
	}
	return b, func() error { return nil }, nil
}

// syncDir is a no-op where directories cannot be fsynced (Windows: the
// rename itself is what MoveFileEx makes durable).
func syncDir(dir string) error { return nil }
