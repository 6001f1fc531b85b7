package grammar

// stepString consumes one byte of a string body (after the opening quote).
// It returns aDone on the closing quote. Characters are counted in f.n as
// code points (an escape is one), saturating at minLen when maxLen is
// unbounded so that states merge. UTF-8 must be well formed (RFC 3629
// table 3-7: no overlongs, surrogates or values above U+10FFFF).
func stepString(f *frame, minLen, maxLen int32, escapes bool, b byte) action {
	switch {
	case f.u8n > 0:
		if b < f.u8lo || b > f.u8hi {
			return aReject
		}
		f.u8n--
		f.u8lo, f.u8hi = 0x80, 0xBF
		if f.u8n == 0 {
			f.u8lo, f.u8hi = 0, 0
		}
		return aOK
	case f.esc == 1:
		return stepEscape(f, b)
	case f.esc >= 2:
		return stepHex(f, b)
	case b == '"':
		if f.n < minLen {
			return aReject
		}
		return aDone
	case b < 0x20:
		return aReject
	}
	if maxLen >= 0 && f.n >= maxLen {
		return aReject
	}
	switch {
	case b == '\\':
		if !escapes {
			return aReject
		}
		f.esc = 1
	case b < 0x80:
	case b >= 0xC2 && b <= 0xDF:
		f.u8n, f.u8lo, f.u8hi = 1, 0x80, 0xBF
	case b == 0xE0:
		f.u8n, f.u8lo, f.u8hi = 2, 0xA0, 0xBF
	case b >= 0xE1 && b <= 0xEC, b == 0xEE, b == 0xEF:
		f.u8n, f.u8lo, f.u8hi = 2, 0x80, 0xBF
	case b == 0xED:
		f.u8n, f.u8lo, f.u8hi = 2, 0x80, 0x9F
	case b == 0xF0:
		f.u8n, f.u8lo, f.u8hi = 3, 0x90, 0xBF
	case b >= 0xF1 && b <= 0xF3:
		f.u8n, f.u8lo, f.u8hi = 3, 0x80, 0xBF
	case b == 0xF4:
		f.u8n, f.u8lo, f.u8hi = 3, 0x80, 0x8F
	default:
		return aReject
	}
	if maxLen >= 0 || f.n < minLen {
		f.n++
	}
	return aOK
}

// stepEscape takes the byte after a backslash (RFC 8259 section 7).
func stepEscape(f *frame, b byte) action {
	switch b {
	case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
		f.esc = 0
	case 'u':
		f.esc, f.v = 2, 0
	default:
		return aReject
	}
	return aOK
}

// stepHex takes a hex digit of \uXXXX; surrogate code units (D800-DFFF)
// are refused as soon as the second digit shows one.
func stepHex(f *frame, b byte) action {
	var d int64
	switch {
	case b >= '0' && b <= '9':
		d = int64(b - '0')
	case b >= 'a' && b <= 'f':
		d = int64(b-'a') + 10
	case b >= 'A' && b <= 'F':
		d = int64(b-'A') + 10
	default:
		return aReject
	}
	f.v = f.v<<4 | d
	if f.esc == 3 && f.v >= 0xD8 && f.v <= 0xDF {
		return aReject
	}
	f.esc++
	if f.esc == 6 {
		f.esc, f.v = 0, 0
	}
	return aOK
}
