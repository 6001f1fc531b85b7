package conv

import (
	"math/rand/v2"
	"syscall"
	"testing"
	"unsafe"
)

// TestDWPlanePageGuard places the input and the assembly's buffer against
// inaccessible pages, the input first right after one and the buffer right
// before the other, then the other way round, so that a kernel load or
// store reaching before the first or past the last element of either
// faults. Every kernel, K, stride, width and padding runs both ways.
func TestDWPlanePageGuard(t *testing.T) {
	page := syscall.Getpagesize()
	const dataPages = 8
	mem, err := syscall.Mmap(-1, 0, (dataPages+2)*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skip("mmap:", err)
	}
	defer syscall.Munmap(mem)
	for _, g := range [][]byte{mem[:page], mem[(dataPages+1)*page:]} {
		if err := syscall.Mprotect(g, syscall.PROT_NONE); err != nil {
			t.Skip("mprotect:", err)
		}
	}
	data := unsafe.Slice((*float32)(unsafe.Pointer(&mem[page])), dataPages*page/4)
	rng := rand.New(rand.NewPCG(11, 12))
	for _, kern := range dwKernels() {
		for _, k := range []int{3, 5} {
			for _, s := range []int{1, 2} {
				for _, width := range dwTestWidths() {
					for pad := range k {
						c, ok := newDWPlaneCase(rng, kern, k, s, width, pad, pad, k+1, s, 1)
						if !ok {
							continue
						}
						dwGuarded(t, c, data)
					}
				}
			}
		}
	}
}

// dwGuarded runs c with dense input rows (ldin = width, so the input's
// first and last elements are its ends) at either end of data and the
// buffer at the other end.
func dwGuarded(t *testing.T, c dwPlaneCase, data []float32) {
	t.Helper()
	src, w, h, nb := c.in, c.d.width, c.d.height, len(c.buf)
	c.d.ldin = w
	for _, inFirst := range []bool{true, false} {
		inAt, bufAt := 0, len(data)-nb
		if !inFirst {
			inAt, bufAt = len(data)-h*w, 0
		}
		c.in, c.buf = data[inAt:inAt+h*w], data[bufAt:bufAt+nb]
		for iy := range h {
			copy(c.in[iy*w:(iy+1)*w], src[iy*(w+3):])
		}
		clear(c.buf)
		c.check(t, c.run(t), nil, 1)
	}
}
