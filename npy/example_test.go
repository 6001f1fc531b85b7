package npy_test

import (
	"bytes"
	"fmt"

	"github.com/tensorbridge/tensorbridge/npy"
)

// Writing an array as np.save does and reading it back. NumPy's np.save of
// np.array([[1.5, -2, 3], [0.25, 5, 6]], dtype='<f4') is the same 152
// bytes: format 1.0, a header dictionary padded with spaces to a 128-byte
// preamble, then 24 bytes of little-endian float32.
func ExampleWrite() {
	var buf bytes.Buffer
	a := &npy.Array{Shape: []int{2, 3}, Data: []float32{1.5, -2, 3, 0.25, 5, 6}}
	if err := npy.Write(&buf, a, nil); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(buf.Len(), bytes.HasPrefix(buf.Bytes(), []byte("\x93NUMPY\x01\x00v\x00")))
	fmt.Printf("%q\n", bytes.TrimRight(buf.Bytes()[10:128], " \n"))
	back, err := npy.Read(&buf)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(back.Shape, back.Data)
	// Output:
	// 152 true
	// "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }"
	// [2 3] [1.5 -2 3 0.25 5 6]
}
