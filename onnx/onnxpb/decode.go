package onnxpb

import (
	"google.golang.org/protobuf/encoding/protowire"
)

// names builds a field-name function from a fixed table; repeated message
// fields that need an index are handled by the callers' closures.
func names(m map[protowire.Number]string) func(protowire.Number) string {
	return func(n protowire.Number) string { return m[n] }
}

// subInto decodes a nested message field into a freshly allocated value and
// returns it; a second occurrence of a singular message field is merged into
// the first, as protobuf requires, by passing the existing pointer.
func subInto[T any](f *field, dst *T, decode func([]byte, *T) error) (*T, error) {
	if dst == nil {
		dst = new(T)
	}
	err := f.sub(func(b []byte) error { return decode(b, dst) })
	return dst, err
}

// subAppend decodes one element of a repeated message field and appends it.
func subAppend[T any](f *field, dst []T, decode func([]byte, *T) error) ([]T, error) {
	var zero T
	dst = append(dst, zero)
	v := &dst[len(dst)-1]
	if err := f.sub(func(b []byte) error { return decode(b, v) }); err != nil {
		return dst[:len(dst)-1], err
	}
	return dst, nil
}

func (d *decoder) model(b []byte, m *Model) error {
	return d.message(b, func(n protowire.Number) string {
		switch n {
		case 1:
			return "ir_version"
		case 8:
			return indexed("opset_import", len(m.OpsetImport))
		case 2:
			return "producer_name"
		case 3:
			return "producer_version"
		case 4:
			return "domain"
		case 5:
			return "model_version"
		case 6:
			return "doc_string"
		case 7:
			return "graph"
		case 14:
			return indexed("metadata_props", len(m.MetadataProps))
		case 20:
			return indexed("training_info", len(m.TrainingInfo))
		case 25:
			return indexed("functions", len(m.Functions))
		case 26:
			return indexed("configuration", len(m.Configuration))
		}
		return ""
	}, func(f *field) (err error) {
		switch f.num {
		case 1:
			m.IRVersion, err = f.int64()
		case 8:
			m.OpsetImport, err = subAppend(f, m.OpsetImport, d.opsetID)
		case 2:
			m.ProducerName, err = f.str()
		case 3:
			m.ProducerVersion, err = f.str()
		case 4:
			m.Domain, err = f.str()
		case 5:
			m.ModelVersion, err = f.int64()
		case 6:
			m.DocString, err = f.str()
		case 7:
			m.Graph, err = subInto(f, m.Graph, d.graph)
		case 14:
			m.MetadataProps, err = subAppend(f, m.MetadataProps, d.stringStringEntry)
		case 20:
			m.TrainingInfo, err = subAppend(f, m.TrainingInfo, d.trainingInfo)
		case 25:
			m.Functions, err = subAppend(f, m.Functions, d.function)
		case 26:
			m.Configuration, err = subAppend(f, m.Configuration, d.deviceConfiguration)
		}
		return err
	})
}

func (d *decoder) opsetID(b []byte, o *OperatorSetID) error {
	return d.message(b, opsetIDFields, func(f *field) (err error) {
		switch f.num {
		case 1:
			o.Domain, err = f.str()
		case 2:
			o.Version, err = f.int64()
		}
		return err
	})
}

func (d *decoder) stringStringEntry(b []byte, e *StringStringEntry) error {
	return d.message(b, stringStringEntryFields, func(f *field) (err error) {
		switch f.num {
		case 1:
			e.Key, err = f.str()
		case 2:
			e.Value, err = f.str()
		}
		return err
	})
}

func (d *decoder) trainingInfo(b []byte, t *TrainingInfo) error {
	return d.message(b, func(n protowire.Number) string {
		switch n {
		case 1:
			return "initialization"
		case 2:
			return "algorithm"
		case 3:
			return indexed("initialization_binding", len(t.InitializationBinding))
		case 4:
			return indexed("update_binding", len(t.UpdateBinding))
		}
		return ""
	}, func(f *field) (err error) {
		switch f.num {
		case 1:
			t.Initialization, err = subInto(f, t.Initialization, d.graph)
		case 2:
			t.Algorithm, err = subInto(f, t.Algorithm, d.graph)
		case 3:
			t.InitializationBinding, err = subAppend(f, t.InitializationBinding, d.stringStringEntry)
		case 4:
			t.UpdateBinding, err = subAppend(f, t.UpdateBinding, d.stringStringEntry)
		}
		return err
	})
}

func (d *decoder) deviceConfiguration(b []byte, c *DeviceConfiguration) error {
	return d.message(b, func(n protowire.Number) string {
		switch n {
		case 1:
			return "name"
		case 2:
			return "num_devices"
		case 3:
			return indexed("device", len(c.Device))
		}
		return ""
	}, func(f *field) (err error) {
		switch f.num {
		case 1:
			c.Name, err = f.str()
		case 2:
			c.NumDevices, err = f.int32()
		case 3:
			var s string
			s, err = f.str()
			c.Device = append(c.Device, s)
		}
		return err
	})
}

func (d *decoder) graph(b []byte, g *Graph) error {
	return d.message(b, func(n protowire.Number) string {
		switch n {
		case 1:
			return indexed("node", len(g.Node))
		case 2:
			return "name"
		case 5:
			return indexed("initializer", len(g.Initializer))
		case 15:
			return indexed("sparse_initializer", len(g.SparseInitializer))
		case 10:
			return "doc_string"
		case 11:
			return indexed("input", len(g.Input))
		case 12:
			return indexed("output", len(g.Output))
		case 13:
			return indexed("value_info", len(g.ValueInfo))
		case 14:
			return indexed("quantization_annotation", len(g.QuantizationAnnotation))
		case 16:
			return indexed("metadata_props", len(g.MetadataProps))
		}
		return ""
	}, func(f *field) (err error) {
		switch f.num {
		case 1:
			g.Node, err = subAppend(f, g.Node, d.node)
		case 2:
			g.Name, err = f.str()
		case 5:
			g.Initializer, err = subAppend(f, g.Initializer, d.tensor)
		case 15:
			g.SparseInitializer, err = subAppend(f, g.SparseInitializer, d.sparseTensor)
		case 10:
			g.DocString, err = f.str()
		case 11:
			g.Input, err = subAppend(f, g.Input, d.valueInfo)
		case 12:
			g.Output, err = subAppend(f, g.Output, d.valueInfo)
		case 13:
			g.ValueInfo, err = subAppend(f, g.ValueInfo, d.valueInfo)
		case 14:
			g.QuantizationAnnotation, err = subAppend(f, g.QuantizationAnnotation, d.tensorAnnotation)
		case 16:
			g.MetadataProps, err = subAppend(f, g.MetadataProps, d.stringStringEntry)
		}
		return err
	})
}

func (d *decoder) tensorAnnotation(b []byte, t *TensorAnnotation) error {
	return d.message(b, func(n protowire.Number) string {
		switch n {
		case 1:
			return "tensor_name"
		case 2:
			return indexed("quant_parameter_tensor_names", len(t.QuantParameterTensorNames))
		}
		return ""
	}, func(f *field) (err error) {
		switch f.num {
		case 1:
			t.TensorName, err = f.str()
		case 2:
			t.QuantParameterTensorNames, err = subAppend(f, t.QuantParameterTensorNames, d.stringStringEntry)
		}
		return err
	})
}

func (d *decoder) node(b []byte, nd *Node) error {
	return d.message(b, func(n protowire.Number) string {
		switch n {
		case 1:
			return indexed("input", len(nd.Input))
		case 2:
			return indexed("output", len(nd.Output))
		case 3:
			return "name"
		case 4:
			return "op_type"
		case 7:
			return "domain"
		case 8:
			return "overload"
		case 5:
			return indexed("attribute", len(nd.Attribute))
		case 6:
			return "doc_string"
		case 9:
			return indexed("metadata_props", len(nd.MetadataProps))
		case 10:
			return indexed("device_configurations", len(nd.DeviceConfigurations))
		}
		return ""
	}, func(f *field) (err error) {
		var s string
		switch f.num {
		case 1:
			s, err = f.str()
			nd.Input = append(nd.Input, s)
		case 2:
			s, err = f.str()
			nd.Output = append(nd.Output, s)
		case 3:
			nd.Name, err = f.str()
		case 4:
			nd.OpType, err = f.str()
		case 7:
			nd.Domain, err = f.str()
		case 8:
			nd.Overload, err = f.str()
		case 5:
			nd.Attribute, err = subAppend(f, nd.Attribute, d.attribute)
		case 6:
			nd.DocString, err = f.str()
		case 9:
			nd.MetadataProps, err = subAppend(f, nd.MetadataProps, d.stringStringEntry)
		case 10:
			nd.DeviceConfigurations, err = subAppend(f, nd.DeviceConfigurations, d.nodeDeviceConfiguration)
		}
		return err
	})
}

func (d *decoder) nodeDeviceConfiguration(b []byte, c *NodeDeviceConfiguration) error {
	return d.message(b, func(n protowire.Number) string {
		switch n {
		case 1:
			return "configuration_id"
		case 2:
			return indexed("sharding_spec", len(c.ShardingSpec))
		case 3:
			return "pipeline_stage"
		}
		return ""
	}, func(f *field) (err error) {
		switch f.num {
		case 1:
			c.ConfigurationID, err = f.str()
		case 2:
			c.ShardingSpec, err = subAppend(f, c.ShardingSpec, d.shardingSpec)
		case 3:
			c.PipelineStage, err = f.int32()
		}
		return err
	})
}

func (d *decoder) shardingSpec(b []byte, s *ShardingSpec) error {
	return d.message(b, func(n protowire.Number) string {
		switch n {
		case 1:
			return "tensor_name"
		case 2:
			return "device"
		case 3:
			return indexed("index_to_device_group_map", len(s.IndexToDeviceGroupMap))
		case 4:
			return indexed("sharded_dim", len(s.ShardedDim))
		}
		return ""
	}, func(f *field) (err error) {
		switch f.num {
		case 1:
			s.TensorName, err = f.str()
		case 2:
			s.Device, err = f.appendInt64s(s.Device)
		case 3:
			s.IndexToDeviceGroupMap, err = subAppend(f, s.IndexToDeviceGroupMap, d.intIntListEntry)
		case 4:
			s.ShardedDim, err = subAppend(f, s.ShardedDim, d.shardedDim)
		}
		return err
	})
}

func (d *decoder) intIntListEntry(b []byte, e *IntIntListEntry) error {
	return d.message(b, intIntListEntryFields, func(f *field) (err error) {
		switch f.num {
		case 1:
			e.Key, err = f.int64()
		case 2:
			e.Value, err = f.appendInt64s(e.Value)
		}
		return err
	})
}

func (d *decoder) shardedDim(b []byte, s *ShardedDim) error {
	return d.message(b, func(n protowire.Number) string {
		switch n {
		case 1:
			return "axis"
		case 2:
			return indexed("simple_sharding", len(s.SimpleSharding))
		}
		return ""
	}, func(f *field) (err error) {
		switch f.num {
		case 1:
			s.Axis, err = f.int64()
		case 2:
			s.SimpleSharding, err = subAppend(f, s.SimpleSharding, d.simpleShardedDim)
		}
		return err
	})
}

func (d *decoder) simpleShardedDim(b []byte, s *SimpleShardedDim) error {
	return d.message(b, simpleShardedDimFields,
		func(f *field) (err error) {
			switch f.num {
			case 1:
				s.DimValue, err = f.int64()
				s.DimParam, s.HasDimValue = "", true
			case 2:
				s.DimParam, err = f.str()
				s.DimValue, s.HasDimValue = 0, false
			case 3:
				s.NumShards, err = f.int64()
			}
			return err
		})
}

func (d *decoder) attribute(b []byte, a *Attribute) error {
	var inferred AttributeType // from the last value field seen, for files without "type"
	err := d.message(b, func(n protowire.Number) string {
		switch n {
		case 1:
			return "name"
		case 21:
			return "ref_attr_name"
		case 13:
			return "doc_string"
		case 20:
			return "type"
		case 2:
			return "f"
		case 3:
			return "i"
		case 4:
			return "s"
		case 5:
			return "t"
		case 6:
			return "g"
		case 22:
			return "sparse_tensor"
		case 14:
			return "tp"
		case 7:
			return "floats"
		case 8:
			return "ints"
		case 9:
			return indexed("strings", len(a.Strings))
		case 10:
			return indexed("tensors", len(a.Tensors))
		case 11:
			return indexed("graphs", len(a.Graphs))
		case 23:
			return indexed("sparse_tensors", len(a.SparseTensors))
		case 15:
			return indexed("type_protos", len(a.TypeProtos))
		}
		return ""
	}, func(f *field) (err error) {
		switch f.num {
		case 1:
			a.Name, err = f.str()
		case 21:
			a.RefAttrName, err = f.str()
		case 13:
			a.DocString, err = f.str()
		case 20:
			var v int32
			v, err = f.int32()
			a.Type = AttributeType(v)
		case 2:
			a.F, err = f.float32()
			inferred = AttrFloat
		case 3:
			a.I, err = f.int64()
			inferred = AttrInt
		case 4:
			a.S, err = f.bytes()
			inferred = AttrString
		case 5:
			a.T, err = subInto(f, a.T, d.tensor)
			inferred = AttrTensor
		case 6:
			a.G, err = subInto(f, a.G, d.graph)
			inferred = AttrGraph
		case 22:
			a.SparseTensor, err = subInto(f, a.SparseTensor, d.sparseTensor)
			inferred = AttrSparseTensor
		case 14:
			a.TP, err = subInto(f, a.TP, d.typeProto)
			inferred = AttrTypeProto
		case 7:
			a.Floats, err = f.appendFloat32s(a.Floats)
			inferred = AttrFloats
		case 8:
			a.Ints, err = f.appendInt64s(a.Ints)
			inferred = AttrInts
		case 9:
			var s []byte
			s, err = f.bytes()
			a.Strings = append(a.Strings, s)
			inferred = AttrStrings
		case 10:
			a.Tensors, err = subAppend(f, a.Tensors, d.tensor)
			inferred = AttrTensors
		case 11:
			a.Graphs, err = subAppend(f, a.Graphs, d.graph)
			inferred = AttrGraphs
		case 23:
			a.SparseTensors, err = subAppend(f, a.SparseTensors, d.sparseTensor)
			inferred = AttrSparseTensors
		case 15:
			a.TypeProtos, err = subAppend(f, a.TypeProtos, d.typeProto)
			inferred = AttrTypeProtos
		}
		return err
	})
	if err == nil && a.Type == AttrUndefined && a.RefAttrName == "" {
		a.Type = inferred
	}
	return err
}

func (d *decoder) valueInfo(b []byte, v *ValueInfo) error {
	return d.message(b, func(n protowire.Number) string {
		switch n {
		case 1:
			return "name"
		case 2:
			return "type"
		case 3:
			return "doc_string"
		case 4:
			return indexed("metadata_props", len(v.MetadataProps))
		}
		return ""
	}, func(f *field) (err error) {
		switch f.num {
		case 1:
			v.Name, err = f.str()
		case 2:
			v.Type, err = subInto(f, v.Type, d.typeProto)
		case 3:
			v.DocString, err = f.str()
		case 4:
			v.MetadataProps, err = subAppend(f, v.MetadataProps, d.stringStringEntry)
		}
		return err
	})
}

func (d *decoder) function(b []byte, fn *Function) error {
	return d.message(b, func(n protowire.Number) string {
		switch n {
		case 1:
			return "name"
		case 4:
			return indexed("input", len(fn.Input))
		case 5:
			return indexed("output", len(fn.Output))
		case 6:
			return indexed("attribute", len(fn.Attribute))
		case 11:
			return indexed("attribute_proto", len(fn.AttributeProto))
		case 7:
			return indexed("node", len(fn.Node))
		case 8:
			return "doc_string"
		case 9:
			return indexed("opset_import", len(fn.OpsetImport))
		case 10:
			return "domain"
		case 13:
			return "overload"
		case 12:
			return indexed("value_info", len(fn.ValueInfo))
		case 14:
			return indexed("metadata_props", len(fn.MetadataProps))
		}
		return ""
	}, func(f *field) (err error) {
		var s string
		switch f.num {
		case 1:
			fn.Name, err = f.str()
		case 4:
			s, err = f.str()
			fn.Input = append(fn.Input, s)
		case 5:
			s, err = f.str()
			fn.Output = append(fn.Output, s)
		case 6:
			s, err = f.str()
			fn.Attribute = append(fn.Attribute, s)
		case 11:
			fn.AttributeProto, err = subAppend(f, fn.AttributeProto, d.attribute)
		case 7:
			fn.Node, err = subAppend(f, fn.Node, d.node)
		case 8:
			fn.DocString, err = f.str()
		case 9:
			fn.OpsetImport, err = subAppend(f, fn.OpsetImport, d.opsetID)
		case 10:
			fn.Domain, err = f.str()
		case 13:
			fn.Overload, err = f.str()
		case 12:
			fn.ValueInfo, err = subAppend(f, fn.ValueInfo, d.valueInfo)
		case 14:
			fn.MetadataProps, err = subAppend(f, fn.MetadataProps, d.stringStringEntry)
		}
		return err
	})
}

// Field-name tables of messages without repeated message fields.
var opsetIDFields = names(map[protowire.Number]string{1: "domain", 2: "version"})

var stringStringEntryFields = names(map[protowire.Number]string{1: "key", 2: "value"})

var intIntListEntryFields = names(map[protowire.Number]string{1: "key", 2: "value"})

var simpleShardedDimFields = names(map[protowire.Number]string{1: "dim_value", 2: "dim_param", 3: "num_shards"})

var segmentFields = names(map[protowire.Number]string{1: "begin", 2: "end"})

var sparseTensorFields = names(map[protowire.Number]string{1: "values", 2: "indices", 3: "dims"})

var typeTensorFields = names(map[protowire.Number]string{1: "elem_type", 2: "shape"})

var typeSequenceFields = names(map[protowire.Number]string{1: "elem_type"})

var typeOptionalFields = names(map[protowire.Number]string{1: "elem_type"})

var typeMapFields = names(map[protowire.Number]string{1: "key_type", 2: "value_type"})

var typeOpaqueFields = names(map[protowire.Number]string{1: "domain", 2: "name"})

var dimensionFields = names(map[protowire.Number]string{1: "dim_value", 2: "dim_param", 3: "denotation"})

var optionalFields = names(map[protowire.Number]string{
	1: "name", 2: "elem_type", 3: "tensor_value", 4: "sparse_tensor_value",
	5: "sequence_value", 6: "map_value", 7: "optional_value",
})
