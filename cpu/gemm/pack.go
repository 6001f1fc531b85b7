package gemm

// packB copies slivers lo..hi of the kcur×ncur block of B at (pc, jc) into
// the panel bp: sliver s holds columns jc+s·nr.. as kcur rows of nr
// floats, zero past column ncur, so that the micro-kernel reads each step
// of B as nr contiguous floats.
func packB(bp []float32, b Matrix, pc, kcur, jc, ncur, nr, lo, hi int) {
	for s := lo; s < hi; s++ {
		dst := bp[s*kcur*nr : (s+1)*kcur*nr]
		j := jc + s*nr
		nv := min(nr, ncur-s*nr)
		base := pc*b.RowStride + j*b.ColStride
		packSliver(dst, b.Data[base:], kcur, nr, nv, b.RowStride, b.ColStride)
	}
}

// packA copies the mcur×kcur block of A at (ic, pc) into ap as slivers of
// mr rows: sliver r holds rows ic+r·mr.. as kcur columns of mr floats,
// zero past row mcur.
func packA(ap []float32, a Matrix, ic, mcur, pc, kcur, mr int) {
	for ir := 0; ir < mcur; ir += mr {
		dst := ap[ir*kcur : (ir+mr)*kcur]
		base := (ic+ir)*a.RowStride + pc*a.ColStride
		packSliver(dst, a.Data[base:], kcur, mr, min(mr, mcur-ir), a.ColStride, a.RowStride)
	}
}

// packSliver is the packing both operands share: dst[p·w+q] = src[p·ps +
// q·qs] for p < steps and q < valid, and 0 for valid ≤ q < w. It picks
// the loop order that reads src contiguously when either stride is 1.
func packSliver(dst, src []float32, steps, w, valid, ps, qs int) {
	dst = dst[:steps*w]
	switch {
	case qs == 1 || valid == 1:
		// Each step is a contiguous run of src.
		for p := range steps {
			d := dst[p*w : p*w+w]
			copy(d, src[p*ps:p*ps+valid])
			clear(d[valid:])
		}
	case ps == 1:
		// Each q is a contiguous run of src; write it down a column.
		for q := range valid {
			s := src[q*qs : q*qs+steps]
			for p, v := range s {
				dst[p*w+q] = v
			}
		}
		if valid < w {
			for p := range steps {
				clear(dst[p*w+valid : p*w+w])
			}
		}
	default:
		for p := range steps {
			d := dst[p*w : p*w+w]
			for q := range valid {
				d[q] = src[p*ps+q*qs]
			}
			clear(d[valid:])
		}
	}
}
