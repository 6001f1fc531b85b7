package capi

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// PJRT_NamedValue_Type values.
const (
	nvString    int32 = 0
	nvInt64     int32 = 1
	nvInt64List int32 = 2
	nvFloat     int32 = 3
	nvBool      int32 = 4
)

// NamedValue is a PJRT_NamedValue: a named option passed to the plugin
// (client create options, topology options) or an attribute it returns
// (plugin, device, topology attributes, cost analysis).
//
// Value holds one of string, int64, []int64, float32 or bool. When encoding,
// int, int32, uint32, []int and float64 are accepted too and converted.
type NamedValue struct {
	Name  string
	Value any
}

// String formats the value as name=value.
func (v NamedValue) String() string { return fmt.Sprintf("%s=%v", v.Name, v.Value) }

// Lookup returns the value named name, or nil.
func Lookup(vals []NamedValue, name string) any {
	for _, v := range vals {
		if v.Name == name {
			return v.Value
		}
	}
	return nil
}

// namedValueType is the PJRT_NamedValue_Type encodeNamedValues gives v, or
// -1 for an unsupported Go type.
func namedValueType(v any) int32 {
	switch v.(type) {
	case string:
		return nvString
	case int64, int, int32, uint32:
		return nvInt64
	case []int64, []int:
		return nvInt64List
	case float32, float64:
		return nvFloat
	case bool:
		return nvBool
	}
	return -1
}

var nvTypeNames = map[int32]string{nvString: "string", nvInt64: "int64", nvInt64List: "[]int64", nvFloat: "float32", nvBool: "bool"}

// checkOptionTypes refuses a known option given with the wrong type. Some
// plugins do not check types: the XLA CPU plugin at PJRT C API 0.81 aborts
// the process (std::bad_variant_access) when cpu_device_count is a string.
func checkOptionTypes(fn string, vals []NamedValue, known map[string]int32) error {
	for _, v := range vals {
		want, ok := known[v.Name]
		if !ok {
			continue
		}
		if got := namedValueType(v.Value); got != want {
			return argError(fn, "option %q must be %s; got %T", v.Name, nvTypeNames[want], v.Value)
		}
	}
	return nil
}

// encodeNamedValues builds a C array of PJRT_NamedValue in pinned Go
// memory; everything it points to is pinned with pin.
func encodeNamedValues(pin *runtime.Pinner, fn string, vals []NamedValue) (unsafe.Pointer, uintptr, error) {
	if len(vals) == 0 {
		return nil, 0, nil
	}
	arr := make([]cNamedValue, len(vals))
	for i, v := range vals {
		c := &arr[i]
		c.structSize = structSizeOf[cNamedValue]()
		if v.Name == "" {
			return nil, 0, argError(fn, "named value %d has an empty name", i)
		}
		name := []byte(v.Name)
		c.name = pinBytes(pin, name)
		c.nameSize = uintptr(len(name))
		c.valueSize = 1
		switch x := v.Value.(type) {
		case string:
			c.typ = nvString
			b := []byte(x)
			c.value = uint64(uintptr(pinBytes(pin, b)))
			c.valueSize = uintptr(len(b))
		case int64:
			c.typ, c.value = nvInt64, uint64(x)
		case int:
			c.typ, c.value = nvInt64, uint64(int64(x))
		case int32:
			c.typ, c.value = nvInt64, uint64(int64(x))
		case uint32:
			c.typ, c.value = nvInt64, uint64(x)
		case []int64:
			l := append([]int64(nil), x...)
			c.typ = nvInt64List
			c.value = uint64(uintptr(pinInt64s(pin, l)))
			c.valueSize = uintptr(len(l))
		case []int:
			l := make([]int64, len(x))
			for j, e := range x {
				l[j] = int64(e)
			}
			c.typ = nvInt64List
			c.value = uint64(uintptr(pinInt64s(pin, l)))
			c.valueSize = uintptr(len(l))
		case float32:
			c.typ, c.value = nvFloat, uint64(math.Float32bits(x))
		case float64:
			c.typ, c.value = nvFloat, uint64(math.Float32bits(float32(x)))
		case bool:
			c.typ = nvBool
			if x {
				c.value = 1
			}
		default:
			return nil, 0, argError(fn, "named value %q has type %T; want string, int64, []int64, float32 or bool", v.Name, v.Value)
		}
	}
	p := unsafe.Pointer(unsafe.SliceData(arr))
	pin.Pin(p)
	return p, uintptr(len(arr)), nil
}

// readNamedValues copies a C array of n PJRT_NamedValue into Go values.
// Entries whose type is unknown come back with a Value of the form
// "<unknown named value type N>" rather than being dropped.
func readNamedValues(arr unsafe.Pointer, n uintptr) []NamedValue {
	if arr == nil || n == 0 {
		return nil
	}
	// The stride is the C sizeof(PJRT_NamedValue): the plugin's array uses
	// its own struct layout, which has not changed since the union was
	// introduced (56 bytes on LP64).
	cs := unsafe.Slice((*cNamedValue)(arr), n)
	out := make([]NamedValue, n)
	for i := range cs {
		c := &cs[i]
		out[i].Name = goString(c.name, c.nameSize)
		ptr := *(*unsafe.Pointer)(unsafe.Pointer(&c.value))
		switch c.typ {
		case nvString:
			out[i].Value = goString(ptr, c.valueSize)
		case nvInt64:
			out[i].Value = int64(c.value)
		case nvInt64List:
			l := make([]int64, c.valueSize)
			if ptr != nil && c.valueSize > 0 {
				copy(l, unsafe.Slice((*int64)(ptr), c.valueSize))
			}
			out[i].Value = l
		case nvFloat:
			out[i].Value = math.Float32frombits(uint32(c.value))
		case nvBool:
			out[i].Value = byte(c.value) != 0
		default:
			out[i].Value = fmt.Sprintf("<unknown named value type %d>", c.typ)
		}
	}
	return out
}
