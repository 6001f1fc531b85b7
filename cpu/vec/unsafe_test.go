package vec

import "unsafe"

func unsafePointer(b *bool) unsafe.Pointer { return unsafe.Pointer(b) }
