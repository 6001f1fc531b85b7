package onnxpb

import "google.golang.org/protobuf/encoding/protowire"

// Decoders of value messages: TensorProto, SparseTensorProto, SequenceProto,
// MapProto and OptionalProto (field-name tables in decode.go).

func (d *decoder) tensor(b []byte, t *Tensor) error {
	return d.message(b, func(n protowire.Number) string {
		switch n {
		case 1:
			return "dims"
		case 2:
			return "data_type"
		case 3:
			return "segment"
		case 4:
			return "float_data"
		case 5:
			return "int32_data"
		case 6:
			return indexed("string_data", len(t.StringData))
		case 7:
			return "int64_data"
		case 8:
			return "name"
		case 12:
			return "doc_string"
		case 9:
			return "raw_data"
		case 13:
			return indexed("external_data", len(t.ExternalData))
		case 14:
			return "data_location"
		case 10:
			return "double_data"
		case 11:
			return "uint64_data"
		case 16:
			return indexed("metadata_props", len(t.MetadataProps))
		}
		return ""
	}, func(f *field) (err error) {
		var v int32
		switch f.num {
		case 1:
			t.Dims, err = f.appendInt64s(t.Dims)
		case 2:
			v, err = f.int32()
			t.DataType = DataType(v)
		case 3:
			t.Segment, err = subInto(f, t.Segment, d.segment)
		case 4:
			t.FloatData, err = f.appendFloat32s(t.FloatData)
		case 5:
			t.Int32Data, err = f.appendInt32s(t.Int32Data)
		case 6:
			var s []byte
			s, err = f.bytes()
			t.StringData = append(t.StringData, s)
		case 7:
			t.Int64Data, err = f.appendInt64s(t.Int64Data)
		case 8:
			t.Name, err = f.str()
		case 12:
			t.DocString, err = f.str()
		case 9:
			t.RawData, err = f.bytes()
			if t.RawData == nil && err == nil {
				t.RawData = []byte{} // present but empty
			}
		case 13:
			t.ExternalData, err = subAppend(f, t.ExternalData, d.stringStringEntry)
		case 14:
			v, err = f.int32()
			t.DataLocation = DataLocation(v)
		case 10:
			t.DoubleData, err = f.appendFloat64s(t.DoubleData)
		case 11:
			t.Uint64Data, err = f.appendUint64s(t.Uint64Data)
		case 16:
			t.MetadataProps, err = subAppend(f, t.MetadataProps, d.stringStringEntry)
		}
		return err
	})
}

func (d *decoder) segment(b []byte, s *Segment) error {
	return d.message(b, segmentFields, func(f *field) (err error) {
		switch f.num {
		case 1:
			s.Begin, err = f.int64()
		case 2:
			s.End, err = f.int64()
		}
		return err
	})
}

func (d *decoder) sparseTensor(b []byte, s *SparseTensor) error {
	return d.message(b, sparseTensorFields, func(f *field) (err error) {
		switch f.num {
		case 1:
			s.Values, err = subInto(f, s.Values, d.tensor)
		case 2:
			s.Indices, err = subInto(f, s.Indices, d.tensor)
		case 3:
			s.Dims, err = f.appendInt64s(s.Dims)
		}
		return err
	})
}

func (d *decoder) sequence(b []byte, s *Sequence) error {
	return d.message(b, func(n protowire.Number) string {
		switch n {
		case 1:
			return "name"
		case 2:
			return "elem_type"
		case 3:
			return indexed("tensor_values", len(s.TensorValues))
		case 4:
			return indexed("sparse_tensor_values", len(s.SparseTensorValues))
		case 5:
			return indexed("sequence_values", len(s.SequenceValues))
		case 6:
			return indexed("map_values", len(s.MapValues))
		case 7:
			return indexed("optional_values", len(s.OptionalValues))
		}
		return ""
	}, func(f *field) (err error) {
		switch f.num {
		case 1:
			s.Name, err = f.str()
		case 2:
			var v int32
			v, err = f.int32()
			s.ElemType = ElemKind(v)
		case 3:
			s.TensorValues, err = subAppend(f, s.TensorValues, d.tensor)
		case 4:
			s.SparseTensorValues, err = subAppend(f, s.SparseTensorValues, d.sparseTensor)
		case 5:
			s.SequenceValues, err = subAppend(f, s.SequenceValues, d.sequence)
		case 6:
			s.MapValues, err = subAppend(f, s.MapValues, d.mapValue)
		case 7:
			s.OptionalValues, err = subAppend(f, s.OptionalValues, d.optional)
		}
		return err
	})
}

func (d *decoder) mapValue(b []byte, m *Map) error {
	return d.message(b, func(n protowire.Number) string {
		switch n {
		case 1:
			return "name"
		case 2:
			return "key_type"
		case 3:
			return "keys"
		case 4:
			return indexed("string_keys", len(m.StringKeys))
		case 5:
			return "values"
		}
		return ""
	}, func(f *field) (err error) {
		switch f.num {
		case 1:
			m.Name, err = f.str()
		case 2:
			var v int32
			v, err = f.int32()
			m.KeyType = DataType(v)
		case 3:
			m.Keys, err = f.appendInt64s(m.Keys)
		case 4:
			var s []byte
			s, err = f.bytes()
			m.StringKeys = append(m.StringKeys, s)
		case 5:
			m.Values, err = subInto(f, m.Values, d.sequence)
		}
		return err
	})
}

func (d *decoder) optional(b []byte, o *Optional) error {
	return d.message(b, optionalFields, func(f *field) (err error) {
		switch f.num {
		case 1:
			o.Name, err = f.str()
		case 2:
			var v int32
			v, err = f.int32()
			o.ElemType = ElemKind(v)
		case 3:
			o.TensorValue, err = subInto(f, o.TensorValue, d.tensor)
		case 4:
			o.SparseTensorValue, err = subInto(f, o.SparseTensorValue, d.sparseTensor)
		case 5:
			o.SequenceValue, err = subInto(f, o.SequenceValue, d.sequence)
		case 6:
			o.MapValue, err = subInto(f, o.MapValue, d.mapValue)
		case 7:
			o.OptionalValue, err = subInto(f, o.OptionalValue, d.optional)
		}
		return err
	})
}
