package v1alpha1

import (
	"rawwatch/codec/metajson"
)

// DecodeJSON decodes a MyResource into r, a fresh one, without reflection.
// It decodes exactly as Kubernetes' decoder (sigs.k8s.io/json, case-sensitive)
// would, or returns an error (metajson.ErrDecline) and leaves r in an
// unspecified state: then decode it with that decoder (metajson.Plain), which
// gives the answer (package codec's JSON does). Unusual input declines: see package
// metajson. FuzzDecodeJSON holds the two equal (with opts.NewestWriteOnly:
// equal to the plain decoder's object with its managedFields so reduced).
func (r *MyResource) DecodeJSON(data []byte, opts metajson.Options) error {
	d := metajson.NewDecoder(data, opts)
	return d.Whole(func() error { return r.DecodeJSONFrom(d) })
}

// DecodeJSONFrom is DecodeJSON of the object at d, a value inside a larger
// text (a watch frame's object): it reads the object and stops after it.
// Its plain strings (name, uid, resourceVersion, the messages, ...) come in
// one allocation, the object's own (metajson's Batch).
func (r *MyResource) DecodeJSONFrom(d *metajson.Decoder) error {
	return d.Batch(func() error { return r.fields(d) })
}

func (r *MyResource) fields(d *metajson.Decoder) error {
	return d.Fields(myResourceFields, func(n int) error {
		switch n {
		case 0, 1:
			return d.TypeMetaField(&r.TypeMeta, n)
		case 2:
			return d.ObjectMeta(&r.ObjectMeta)
		case 3:
			return r.Spec.decode(d)
		case 4:
			return r.Status.decode(d)
		}
		return nil
	})
}

var myResourceFields = append(append([]string(nil), metajson.TypeMetaFields...), "metadata", "spec", "status")

var specFields = []string{"message"}

func (s *MyResourceSpec) decode(d *metajson.Decoder) error {
	return d.Fields(specFields, func(int) error { return d.StringTo(&s.Message) })
}

var statusFields = []string{"phase", "message", "observedGeneration", "conditions"}

func (s *MyResourceStatus) decode(d *metajson.Decoder) error {
	return d.Fields(statusFields, func(n int) (err error) {
		switch n {
		case 0:
			s.Phase, err = d.SharedString() // a few values, repeated
		case 1:
			err = d.StringTo(&s.Message)
		case 2:
			s.ObservedGeneration, err = d.Int64()
		case 3:
			s.Conditions, err = d.Conditions()
		}
		return err
	})
}
