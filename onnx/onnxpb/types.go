package onnxpb

import "github.com/tensorbridge/tensorbridge/ir"

// This file holds the Go mirror of the ONNX protobuf messages: onnx.proto as
// on the ONNX main branch in 2025 (through IR version 11 fields, FLOAT8E8M0
// and the 2-bit types), plus onnx-data.proto for test data. Field
// numbers are listed next to each field so the decoder and its tests can be
// checked against the published schema by eye. Strings declared `string` in
// the schema are Go strings; `bytes` fields are []byte.

// Model mirrors ModelProto: the top-level container of an ONNX file.
type Model struct {
	IRVersion       int64                 // 1
	OpsetImport     []OperatorSetID       // 8
	ProducerName    string                // 2
	ProducerVersion string                // 3
	Domain          string                // 4
	ModelVersion    int64                 // 5
	DocString       string                // 6
	Graph           *Graph                // 7
	MetadataProps   []StringStringEntry   // 14
	TrainingInfo    []TrainingInfo        // 20
	Functions       []Function            // 25
	Configuration   []DeviceConfiguration // 26

	// SourceDigest is not part of ONNX: the SHA-256 of the file ReadModel
	// read (zero when the model was decoded from bytes). A compile cache
	// keys on it; it does not cover external tensor data files.
	SourceDigest [32]byte
	// Dir is not part of ONNX: it is the directory external tensor data is
	// resolved against. ReadModel sets it (and each Tensor.BaseDir) to the
	// directory of the model file; Decode leaves it empty.
	Dir string
}

// OperatorSetID mirrors OperatorSetIdProto: an (operator domain, version)
// pair the model imports. Domain "" and "ai.onnx" both mean the default ONNX
// operator set.
type OperatorSetID struct {
	Domain  string // 1
	Version int64  // 2
}

// StringStringEntry mirrors StringStringEntryProto, ONNX's key/value pair.
type StringStringEntry struct {
	Key   string // 1
	Value string // 2
}

// TrainingInfo mirrors TrainingInfoProto. Decoded for completeness; the
// importer does not use it.
type TrainingInfo struct {
	Initialization        *Graph              // 1
	Algorithm             *Graph              // 2
	InitializationBinding []StringStringEntry // 3
	UpdateBinding         []StringStringEntry // 4
}

// DeviceConfiguration mirrors DeviceConfigurationProto (IR 11).
type DeviceConfiguration struct {
	Name       string   // 1
	NumDevices int32    // 2
	Device     []string // 3
}

// Graph mirrors GraphProto: a list of nodes in topological order with
// named inputs, outputs and constant initializers.
type Graph struct {
	Node                   []Node              // 1
	Name                   string              // 2
	Initializer            []Tensor            // 5
	SparseInitializer      []SparseTensor      // 15
	DocString              string              // 10
	Input                  []ValueInfo         // 11
	Output                 []ValueInfo         // 12
	ValueInfo              []ValueInfo         // 13
	QuantizationAnnotation []TensorAnnotation  // 14
	MetadataProps          []StringStringEntry // 16
}

// TensorAnnotation mirrors TensorAnnotation (quantization parameters).
type TensorAnnotation struct {
	TensorName                string              // 1
	QuantParameterTensorNames []StringStringEntry // 2
}

// Node mirrors NodeProto: one operator application.
type Node struct {
	Input                []string                  // 1 ("" marks an omitted optional input)
	Output               []string                  // 2
	Name                 string                    // 3
	OpType               string                    // 4
	Domain               string                    // 7
	Overload             string                    // 8
	Attribute            []Attribute               // 5
	DocString            string                    // 6
	MetadataProps        []StringStringEntry       // 9
	DeviceConfigurations []NodeDeviceConfiguration // 10
}

// NodeDeviceConfiguration mirrors NodeDeviceConfigurationProto (IR 11).
type NodeDeviceConfiguration struct {
	ConfigurationID string         // 1
	ShardingSpec    []ShardingSpec // 2
	PipelineStage   int32          // 3
}

// ShardingSpec mirrors ShardingSpecProto.
type ShardingSpec struct {
	TensorName            string            // 1
	Device                []int64           // 2
	IndexToDeviceGroupMap []IntIntListEntry // 3
	ShardedDim            []ShardedDim      // 4
}

// IntIntListEntry mirrors IntIntListEntryProto.
type IntIntListEntry struct {
	Key   int64   // 1
	Value []int64 // 2
}

// ShardedDim mirrors ShardedDimProto.
type ShardedDim struct {
	Axis           int64              // 1
	SimpleSharding []SimpleShardedDim // 2
}

// SimpleShardedDim mirrors SimpleShardedDimProto. Exactly one of DimValue
// (HasDimValue true) or DimParam is meaningful.
type SimpleShardedDim struct {
	DimValue    int64  // 1 (oneof dim)
	DimParam    string // 2 (oneof dim)
	HasDimValue bool
	NumShards   int64 // 3
}

// AttributeType mirrors AttributeProto.AttributeType.
type AttributeType int32

// AttributeProto.AttributeType values (onnx.proto).
const (
	AttrUndefined     AttributeType = 0
	AttrFloat         AttributeType = 1
	AttrInt           AttributeType = 2
	AttrString        AttributeType = 3
	AttrTensor        AttributeType = 4
	AttrGraph         AttributeType = 5
	AttrFloats        AttributeType = 6
	AttrInts          AttributeType = 7
	AttrStrings       AttributeType = 8
	AttrTensors       AttributeType = 9
	AttrGraphs        AttributeType = 10
	AttrSparseTensor  AttributeType = 11
	AttrSparseTensors AttributeType = 12
	AttrTypeProto     AttributeType = 13
	AttrTypeProtos    AttributeType = 14
)

// Attribute mirrors AttributeProto: a named operator parameter. Type says
// which value field is meaningful. When a file omits Type (IR version 1), the
// decoder infers it from the value field present.
type Attribute struct {
	Name          string         // 1
	RefAttrName   string         // 21 (reference to a parent function's attribute)
	DocString     string         // 13
	Type          AttributeType  // 20
	F             float32        // 2
	I             int64          // 3
	S             []byte         // 4
	T             *Tensor        // 5
	G             *Graph         // 6
	SparseTensor  *SparseTensor  // 22
	TP            *TypeProto     // 14
	Floats        []float32      // 7
	Ints          []int64        // 8
	Strings       [][]byte       // 9
	Tensors       []Tensor       // 10
	Graphs        []Graph        // 11
	SparseTensors []SparseTensor // 23
	TypeProtos    []TypeProto    // 15
}

// ValueInfo mirrors ValueInfoProto: a named value and its type.
type ValueInfo struct {
	Name          string              // 1
	Type          *TypeProto          // 2 (nil when absent)
	DocString     string              // 3
	MetadataProps []StringStringEntry // 4
}

// DataType mirrors TensorProto.DataType: the element type of a tensor.
type DataType int32

// TensorProto.DataType values (onnx.proto, through ONNX 1.20).
const (
	Undefined      DataType = 0
	Float          DataType = 1
	Uint8          DataType = 2
	Int8           DataType = 3
	Uint16         DataType = 4
	Int16          DataType = 5
	Int32          DataType = 6
	Int64          DataType = 7
	String         DataType = 8
	Bool           DataType = 9
	Float16        DataType = 10
	Double         DataType = 11
	Uint32         DataType = 12
	Uint64         DataType = 13
	Complex64      DataType = 14
	Complex128     DataType = 15
	BFloat16       DataType = 16
	Float8E4M3FN   DataType = 17
	Float8E4M3FNUZ DataType = 18
	Float8E5M2     DataType = 19
	Float8E5M2FNUZ DataType = 20
	Uint4          DataType = 21
	Int4           DataType = 22
	Float4E2M1     DataType = 23
	Float8E8M0     DataType = 24
	Uint2          DataType = 25
	Int2           DataType = 26
)

// DataLocation mirrors TensorProto.DataLocation.
type DataLocation int32

// TensorProto.DataLocation values.
const (
	LocationDefault  DataLocation = 0 // data in raw_data or a typed field
	LocationExternal DataLocation = 1 // data in a file named by external_data
)

// Segment mirrors TensorProto.Segment (a chunk of a larger tensor).
type Segment struct {
	Begin int64 // 1
	End   int64 // 2
}

// Tensor mirrors TensorProto: a constant tensor. Exactly one of the payload
// fields is used, chosen by DataType (see the ONNX schema). RawData is nil
// when the field is absent and non-nil (possibly empty) when present.
type Tensor struct {
	Dims          []int64             // 1
	DataType      DataType            // 2
	Segment       *Segment            // 3 (nil when absent)
	FloatData     []float32           // 4 (float, complex64)
	Int32Data     []int32             // 5 (int32 and all narrower types, bit patterns)
	StringData    [][]byte            // 6
	Int64Data     []int64             // 7
	Name          string              // 8
	DocString     string              // 12
	RawData       []byte              // 9 (little-endian, fixed width)
	ExternalData  []StringStringEntry // 13 (keys location, offset, length, checksum)
	DataLocation  DataLocation        // 14
	DoubleData    []float64           // 10 (double, complex128)
	Uint64Data    []uint64            // 11 (uint32, uint64)
	MetadataProps []StringStringEntry // 16

	// BaseDir is not part of ONNX: the directory external data locations are
	// relative to. ReadModel and ReadTensor set it; "" means the current
	// directory.
	BaseDir string

	// converted is not part of ONNX: the tensor's values, once an importer
	// has converted them and released the payload (ReleaseData); ToIR
	// returns it.
	converted *ir.Tensor
}

// SparseTensor mirrors SparseTensorProto (COO format).
type SparseTensor struct {
	Values  *Tensor // 1
	Indices *Tensor // 2
	Dims    []int64 // 3
}

// TypeProto mirrors TypeProto. Exactly one of the *Type pointers is non-nil
// for a well-formed type; all nil means the type was left unspecified.
type TypeProto struct {
	TensorType       *TypeTensor       // 1
	SequenceType     *TypeSequence     // 4
	MapType          *TypeMap          // 5
	OptionalType     *TypeOptional     // 9
	SparseTensorType *TypeSparseTensor // 8
	OpaqueType       *TypeOpaque       // 7 (onnx-ml)
	Denotation       string            // 6
}

// TypeTensor mirrors TypeProto.Tensor: a dense tensor type. Shape is nil
// when the rank is unknown; a non-nil Shape with no Dim is a scalar.
type TypeTensor struct {
	ElemType DataType     // 1
	Shape    *TensorShape // 2
}

// TypeSequence mirrors TypeProto.Sequence.
type TypeSequence struct {
	ElemType *TypeProto // 1
}

// TypeMap mirrors TypeProto.Map.
type TypeMap struct {
	KeyType   DataType   // 1
	ValueType *TypeProto // 2
}

// TypeOptional mirrors TypeProto.Optional.
type TypeOptional struct {
	ElemType *TypeProto // 1
}

// TypeSparseTensor mirrors TypeProto.SparseTensor.
type TypeSparseTensor struct {
	ElemType DataType     // 1
	Shape    *TensorShape // 2
}

// TypeOpaque mirrors TypeProto.Opaque (onnx-ml).
type TypeOpaque struct {
	Domain string // 1
	Name   string // 2
}

// TensorShape mirrors TensorShapeProto.
type TensorShape struct {
	Dim []Dimension // 1
}

// Dimension mirrors TensorShapeProto.Dimension. A dimension is static when
// HasDimValue is true (DimValue holds it), symbolic when DimParam is not
// empty, and unknown otherwise.
type Dimension struct {
	DimValue    int64  // 1 (oneof value)
	DimParam    string // 2 (oneof value)
	HasDimValue bool
	Denotation  string // 3
}

// Function mirrors FunctionProto: a model-local operator defined by a
// subgraph.
type Function struct {
	Name           string              // 1
	Input          []string            // 4
	Output         []string            // 5
	Attribute      []string            // 6 (attribute names without defaults)
	AttributeProto []Attribute         // 11 (attributes with defaults)
	Node           []Node              // 7
	DocString      string              // 8
	OpsetImport    []OperatorSetID     // 9
	Domain         string              // 10
	Overload       string              // 13
	ValueInfo      []ValueInfo         // 12
	MetadataProps  []StringStringEntry // 14
}

// ElemKind mirrors SequenceProto.DataType / OptionalProto.DataType
// (onnx-data.proto): what kind of value a Sequence or Optional holds.
type ElemKind int32

// SequenceProto.DataType / OptionalProto.DataType values.
const (
	KindUndefined    ElemKind = 0
	KindTensor       ElemKind = 1
	KindSparseTensor ElemKind = 2
	KindSequence     ElemKind = 3
	KindMap          ElemKind = 4
	KindOptional     ElemKind = 5
)

// Sequence mirrors SequenceProto (onnx-data.proto), used by the ONNX test
// data for sequence-typed inputs and outputs.
type Sequence struct {
	Name               string         // 1
	ElemType           ElemKind       // 2
	TensorValues       []Tensor       // 3
	SparseTensorValues []SparseTensor // 4
	SequenceValues     []Sequence     // 5
	MapValues          []Map          // 6
	OptionalValues     []Optional     // 7
}

// Map mirrors MapProto (onnx-data.proto).
type Map struct {
	Name       string    // 1
	KeyType    DataType  // 2
	Keys       []int64   // 3
	StringKeys [][]byte  // 4
	Values     *Sequence // 5
}

// Optional mirrors OptionalProto (onnx-data.proto). ElemType Undefined
// (with no value) is the "None" optional.
type Optional struct {
	Name              string        // 1
	ElemType          ElemKind      // 2
	TensorValue       *Tensor       // 3
	SparseTensorValue *SparseTensor // 4
	SequenceValue     *Sequence     // 5
	MapValue          *Map          // 6
	OptionalValue     *Optional     // 7
}
