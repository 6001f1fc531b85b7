package onnxpb

import "google.golang.org/protobuf/encoding/protowire"

// Decoders of TypeProto and its variants and of TensorShapeProto (field-name
// tables in decode.go).

var typeProtoNames = names(map[protowire.Number]string{
	1: "tensor_type", 4: "sequence_type", 5: "map_type", 9: "optional_type",
	8: "sparse_tensor_type", 7: "opaque_type", 6: "denotation",
})

// typeProto decodes TypeProto. Its value is a oneof: the last member seen
// wins and clears the others, as protobuf specifies.
func (d *decoder) typeProto(b []byte, t *TypeProto) error {
	return d.message(b, typeProtoNames, func(f *field) (err error) {
		keep := func() TypeProto { return TypeProto{Denotation: t.Denotation} }
		switch f.num {
		case 1:
			v := t.TensorType
			*t = keep()
			t.TensorType, err = subInto(f, v, d.typeTensor)
		case 4:
			v := t.SequenceType
			*t = keep()
			t.SequenceType, err = subInto(f, v, d.typeSequence)
		case 5:
			v := t.MapType
			*t = keep()
			t.MapType, err = subInto(f, v, d.typeMap)
		case 9:
			v := t.OptionalType
			*t = keep()
			t.OptionalType, err = subInto(f, v, d.typeOptional)
		case 8:
			v := t.SparseTensorType
			*t = keep()
			t.SparseTensorType, err = subInto(f, v, d.typeSparseTensor)
		case 7:
			v := t.OpaqueType
			*t = keep()
			t.OpaqueType, err = subInto(f, v, d.typeOpaque)
		case 6:
			t.Denotation, err = f.str()
		}
		return err
	})
}

func (d *decoder) typeTensor(b []byte, t *TypeTensor) error {
	return d.message(b, typeTensorFields, func(f *field) (err error) {
		switch f.num {
		case 1:
			var v int32
			v, err = f.int32()
			t.ElemType = DataType(v)
		case 2:
			t.Shape, err = subInto(f, t.Shape, d.tensorShape)
		}
		return err
	})
}

func (d *decoder) typeSparseTensor(b []byte, t *TypeSparseTensor) error {
	var tt TypeTensor
	err := d.typeTensor(b, &tt)
	t.ElemType, t.Shape = tt.ElemType, tt.Shape
	return err
}

func (d *decoder) typeSequence(b []byte, t *TypeSequence) error {
	return d.message(b, typeSequenceFields, func(f *field) (err error) {
		if f.num == 1 {
			t.ElemType, err = subInto(f, t.ElemType, d.typeProto)
		}
		return err
	})
}

func (d *decoder) typeOptional(b []byte, t *TypeOptional) error {
	return d.message(b, typeOptionalFields, func(f *field) (err error) {
		if f.num == 1 {
			t.ElemType, err = subInto(f, t.ElemType, d.typeProto)
		}
		return err
	})
}

func (d *decoder) typeMap(b []byte, t *TypeMap) error {
	return d.message(b, typeMapFields, func(f *field) (err error) {
		switch f.num {
		case 1:
			var v int32
			v, err = f.int32()
			t.KeyType = DataType(v)
		case 2:
			t.ValueType, err = subInto(f, t.ValueType, d.typeProto)
		}
		return err
	})
}

func (d *decoder) typeOpaque(b []byte, t *TypeOpaque) error {
	return d.message(b, typeOpaqueFields, func(f *field) (err error) {
		switch f.num {
		case 1:
			t.Domain, err = f.str()
		case 2:
			t.Name, err = f.str()
		}
		return err
	})
}

func (d *decoder) tensorShape(b []byte, s *TensorShape) error {
	return d.message(b, func(n protowire.Number) string {
		if n == 1 {
			return indexed("dim", len(s.Dim))
		}
		return ""
	}, func(f *field) (err error) {
		if f.num == 1 {
			s.Dim, err = subAppend(f, s.Dim, d.dimension)
		}
		return err
	})
}

func (d *decoder) dimension(b []byte, dm *Dimension) error {
	return d.message(b, dimensionFields,
		func(f *field) (err error) {
			switch f.num {
			case 1:
				dm.DimValue, err = f.int64()
				dm.DimParam, dm.HasDimValue = "", true
			case 2:
				dm.DimParam, err = f.str()
				dm.DimValue, dm.HasDimValue = 0, false
			case 3:
				dm.Denotation, err = f.str()
			}
			return err
		})
}
