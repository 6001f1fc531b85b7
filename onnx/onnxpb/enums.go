package onnxpb

import "fmt"

var dataTypeNames = [...]string{
	Undefined: "UNDEFINED", Float: "FLOAT", Uint8: "UINT8", Int8: "INT8", Uint16: "UINT16",
	Int16: "INT16", Int32: "INT32", Int64: "INT64", String: "STRING", Bool: "BOOL",
	Float16: "FLOAT16", Double: "DOUBLE", Uint32: "UINT32", Uint64: "UINT64",
	Complex64: "COMPLEX64", Complex128: "COMPLEX128", BFloat16: "BFLOAT16",
	Float8E4M3FN: "FLOAT8E4M3FN", Float8E4M3FNUZ: "FLOAT8E4M3FNUZ", Float8E5M2: "FLOAT8E5M2",
	Float8E5M2FNUZ: "FLOAT8E5M2FNUZ", Uint4: "UINT4", Int4: "INT4", Float4E2M1: "FLOAT4E2M1",
	Float8E8M0: "FLOAT8E8M0", Uint2: "UINT2", Int2: "INT2",
}

// String returns the ONNX name of the data type (e.g. "FLOAT", "BFLOAT16"),
// or "DataType(N)" for values this package does not know.
func (t DataType) String() string {
	if t >= 0 && int(t) < len(dataTypeNames) {
		return dataTypeNames[t]
	}
	return fmt.Sprintf("DataType(%d)", int32(t))
}

// Known reports whether t is a data type defined by ONNX (other than
// UNDEFINED).
func (t DataType) Known() bool { return t > Undefined && int(t) < len(dataTypeNames) }

// Bits returns the storage width of one element in raw_data, in bits (4 for
// INT4, 128 for COMPLEX128), or 0 for STRING, UNDEFINED and unknown types.
func (t DataType) Bits() int {
	switch t {
	case Bool, Int8, Uint8, Float8E4M3FN, Float8E4M3FNUZ, Float8E5M2, Float8E5M2FNUZ, Float8E8M0:
		return 8
	case Int16, Uint16, Float16, BFloat16:
		return 16
	case Int32, Uint32, Float:
		return 32
	case Int64, Uint64, Double, Complex64:
		return 64
	case Complex128:
		return 128
	case Int4, Uint4, Float4E2M1:
		return 4
	case Int2, Uint2:
		return 2
	}
	return 0
}

var attrTypeNames = [...]string{
	AttrUndefined: "UNDEFINED", AttrFloat: "FLOAT", AttrInt: "INT", AttrString: "STRING",
	AttrTensor: "TENSOR", AttrGraph: "GRAPH", AttrFloats: "FLOATS", AttrInts: "INTS",
	AttrStrings: "STRINGS", AttrTensors: "TENSORS", AttrGraphs: "GRAPHS",
	AttrSparseTensor: "SPARSE_TENSOR", AttrSparseTensors: "SPARSE_TENSORS",
	AttrTypeProto: "TYPE_PROTO", AttrTypeProtos: "TYPE_PROTOS",
}

// String returns the ONNX name of the attribute type (e.g. "INTS").
func (t AttributeType) String() string {
	if t >= 0 && int(t) < len(attrTypeNames) {
		return attrTypeNames[t]
	}
	return fmt.Sprintf("AttributeType(%d)", int32(t))
}

var elemKindNames = [...]string{
	KindUndefined: "UNDEFINED", KindTensor: "TENSOR", KindSparseTensor: "SPARSE_TENSOR",
	KindSequence: "SEQUENCE", KindMap: "MAP", KindOptional: "OPTIONAL",
}

// String returns the onnx-data.proto name of the kind (e.g. "TENSOR").
func (k ElemKind) String() string {
	if k >= 0 && int(k) < len(elemKindNames) {
		return elemKindNames[k]
	}
	return fmt.Sprintf("ElemKind(%d)", int32(k))
}

// String returns "DEFAULT" or "EXTERNAL".
func (l DataLocation) String() string {
	switch l {
	case LocationDefault:
		return "DEFAULT"
	case LocationExternal:
		return "EXTERNAL"
	}
	return fmt.Sprintf("DataLocation(%d)", int32(l))
}

// Static reports whether the dimension has a known value.
func (d Dimension) Static() bool { return d.HasDimValue }

// String returns the dimension as ONNX tools print it: the value, the
// symbolic name, or "?" when unknown.
func (d Dimension) String() string {
	switch {
	case d.HasDimValue:
		return fmt.Sprint(d.DimValue)
	case d.DimParam != "":
		return d.DimParam
	}
	return "?"
}
