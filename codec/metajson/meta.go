package metajson

import (
	"bytes"
	"errors"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Fields reads the object at the decoder, whose fields are listed in names
// (at most 64): for each member it calls read with the field's index, unless
// the value is null (which leaves a fresh field zero); an unknown key's value
// is skipped. A field seen twice declines. In an object whose names begin
// with TypeMetaFields, a key that is "apiVersion" or "kind" in another case
// declines too: client-go's serializer finds the two in any case
// (encoding/json's rule), so such a key may be what it finds.
func (d *Decoder) Fields(names []string, read func(n int) error) error {
	var seen uint64
	return d.Members(func(key []byte) error {
		for n, name := range names {
			if string(key) != name {
				continue
			}
			if err := Seen(&seen, n); err != nil {
				return err
			}
			if d.Null() {
				return nil
			}
			return read(n)
		}
		if len(names) >= 2 && names[0] == typeMetaFields[0] && names[1] == typeMetaFields[1] &&
			(bytes.EqualFold(key, apiVersionKey) || bytes.EqualFold(key, kindKey)) {
			return ErrDecline
		}
		_, err := d.Skip()
		return err
	})
}

var apiVersionKey, kindKey = []byte(typeMetaFields[0]), []byte(typeMetaFields[1])

// TypeMeta's members, as MyResource and every generated type inline them.
var typeMetaFields = []string{"apiVersion", "kind"}

// TypeMetaFields are the keys TypeMetaField reads, for a caller's own
// field list: put them first.
var TypeMetaFields = typeMetaFields

// TypeMetaField reads field n of TypeMetaFields.
func (d *Decoder) TypeMetaField(tm *metav1.TypeMeta, n int) (err error) {
	switch n {
	case 0:
		tm.APIVersion, err = d.SharedString()
	case 1:
		tm.Kind, err = d.SharedString()
	}
	return err
}

var objectMetaFields = []string{"name", "generateName", "namespace", "selfLink", "uid", "resourceVersion",
	"generation", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
	"ownerReferences", "finalizers", "managedFields"}

// ObjectMeta reads an object's metadata into m, a fresh one (its strings
// with StringTo: see Batch).
func (d *Decoder) ObjectMeta(m *metav1.ObjectMeta) error {
	return d.Fields(objectMetaFields, func(n int) (err error) {
		switch n {
		case 0:
			err = d.StringTo(&m.Name)
		case 1:
			err = d.StringTo(&m.GenerateName)
		case 2:
			m.Namespace, err = d.SharedString()
		case 3:
			err = d.StringTo(&m.SelfLink)
		case 4:
			err = d.StringTo((*string)(&m.UID))
		case 5:
			err = d.StringTo(&m.ResourceVersion)
		case 6:
			m.Generation, err = d.Int64()
		case 7:
			err = d.Time(&m.CreationTimestamp)
		case 8:
			m.DeletionTimestamp = new(metav1.Time)
			err = d.Time(m.DeletionTimestamp)
		case 9:
			err = d.Delegate(&m.DeletionGracePeriodSeconds)
		case 10:
			m.Labels, err = d.labels()
		case 11:
			m.Annotations, err = d.StringMap()
		case 12:
			m.OwnerReferences, err = d.OwnerReferences()
		case 13:
			m.Finalizers, err = d.Strings()
		case 14:
			m.ManagedFields, err = d.managedFields()
		}
		return err
	})
}

var managedFieldsEntryFields = []string{"manager", "operation", "apiVersion", "time", "fieldsType", "fieldsV1", "subresource"}

func (d *Decoder) managedFields() ([]metav1.ManagedFieldsEntry, error) {
	if d.opts.NewestWriteOnly {
		return d.newestWrite()
	}
	return objects(d, managedFieldsEntryFields, func(e *metav1.ManagedFieldsEntry, n int) (err error) {
		switch n {
		case 0:
			e.Manager, err = d.String()
		case 1:
			var op string
			op, err = d.String()
			e.Operation = metav1.ManagedFieldsOperationType(op)
		case 2:
			e.APIVersion, err = d.String()
		case 3:
			e.Time = new(metav1.Time)
			err = d.Time(e.Time)
		case 4:
			e.FieldsType, err = d.String()
		case 5:
			var raw []byte
			if raw, err = d.Skip(); err == nil {
				e.FieldsV1 = new(metav1.FieldsV1)
				err = e.FieldsV1.UnmarshalJSON(raw)
			}
		case 6:
			e.Subresource, err = d.String()
		}
		return err
	})
}

// newestWrite reads managedFields as Options.NewestWriteOnly says: what
// Plain would make of them, reduced to the newest time. Only the times are
// made (on the stack), the rest checked as Plain would take it; the entry
// and its time come in one allocation. Times in the form Kubernetes writes
// (utcSeconds') are compared as text, which orders them as time does, and
// only the newest is made.
func (d *Decoder) newestWrite() ([]metav1.ManagedFieldsEntry, error) {
	var newest, t metav1.Time
	var newestText []byte // the newest, when it is in utcSeconds' form: not made yet
	has := false
	err := d.Elements(func() error {
		return d.Fields(managedFieldsEntryFields, func(n int) error {
			switch n {
			case 3:
				start := d.i
				if s, e, plain, err := d.stringSpan(); err == nil && plain && utcForm(d.b[s:e]) {
					if text := d.b[s:e]; !has || newestText != nil {
						if !has || bytes.Compare(text, newestText) > 0 {
							newestText, has = text, true
						}
						return nil
					}
				}
				d.i = start
				if err := d.Time(&t); err != nil {
					return err
				}
				if newestText != nil {
					newest.Time, newestText = utcTime(newestText).Local(), nil
				}
				if !has || t.After(newest.Time) {
					newest, has = t, true
				}
				return nil
			case 5: // fieldsV1: any value (FieldsV1.UnmarshalJSON keeps it raw)
				return d.skipFields()
			}
			_, _, _, err := d.stringSpan() // a string, as Plain requires
			return err
		})
	})
	if err != nil {
		return nil, err
	}
	if !has {
		return []metav1.ManagedFieldsEntry{}, nil
	}
	if newestText != nil {
		newest.Time = utcTime(newestText).Local()
	}
	w := &struct {
		entry [1]metav1.ManagedFieldsEntry
		time  metav1.Time
	}{time: newest}
	w.entry[0].Time = &w.time
	return w.entry[:], nil
}

// NewestWrite is what Options.NewestWriteOnly makes of managedFields that
// Plain decoded: one entry with the newest time, none if no entry has a time,
// nil for nil.
func NewestWrite(mf []metav1.ManagedFieldsEntry) []metav1.ManagedFieldsEntry {
	if mf == nil {
		return nil
	}
	var newest *metav1.Time
	for _, e := range mf {
		if e.Time != nil && (newest == nil || e.Time.After(newest.Time)) {
			newest = e.Time
		}
	}
	if newest == nil {
		return []metav1.ManagedFieldsEntry{}
	}
	return []metav1.ManagedFieldsEntry{{Time: newest}}
}

// Time reads a time as metav1.Time.UnmarshalJSON does: an RFC 3339 string,
// in the local zone.
func (d *Decoder) Time(t *metav1.Time) error {
	start := d.i
	s, e, plain, err := d.stringSpan()
	if err != nil {
		return err
	}
	if !plain {
		d.i = start
		raw, err := d.Skip()
		if err != nil || t.UnmarshalJSON(raw) != nil {
			return ErrDecline
		}
		return nil
	}
	if ut, ok := utcSeconds(d.b[s:e]); ok {
		t.Time = ut.Local()
		return nil
	}
	pt, err := time.Parse(time.RFC3339, string(d.b[s:e]))
	if err != nil {
		return ErrDecline
	}
	t.Time = pt.Local()
	return nil
}

// utcSeconds reads the form Kubernetes writes times in, UTC and whole
// seconds ("2006-01-02T15:04:05Z"), as time.Parse(time.RFC3339, ...) does;
// ok is false for any other form or a field out of range (time.Parse
// decides those). FuzzTime holds it to time.Parse.
func utcSeconds(b []byte) (t time.Time, ok bool) {
	if !utcForm(b) {
		return t, false
	}
	return utcTime(b), true
}

// utcForm tells whether b is a time in utcSeconds' form, every field in
// range. Two such texts compare as their times do.
func utcForm(b []byte) bool {
	if len(b) != len("2006-01-02T15:04:05Z") || b[4] != '-' || b[7] != '-' || b[10] != 'T' ||
		b[13] != ':' || b[16] != ':' || b[19] != 'Z' {
		return false
	}
	y1, y2, mo, day := twoDigits(b, 0), twoDigits(b, 2), twoDigits(b, 5), twoDigits(b, 8)
	h, mi, sec := twoDigits(b, 11), twoDigits(b, 14), twoDigits(b, 17)
	if y1 < 0 || y2 < 0 || mo < 1 || mo > 12 || day < 1 || h < 0 || h > 23 || mi < 0 || mi > 59 || sec < 0 || sec > 59 {
		return false
	}
	year := y1*100 + y2
	return !(day > 31 || day > 30 && (mo == 4 || mo == 6 || mo == 9 || mo == 11) ||
		mo == 2 && day > 28 && (day > 29 || year%4 != 0 || year%100 == 0 && year%400 != 0))
}

// utcTime is the time b writes, in utcSeconds' form (utcForm).
func utcTime(b []byte) time.Time {
	year := twoDigits(b, 0)*100 + twoDigits(b, 2)
	return time.Date(year, time.Month(twoDigits(b, 5)), twoDigits(b, 8),
		twoDigits(b, 11), twoDigits(b, 14), twoDigits(b, 17), 0, time.UTC)
}

// twoDigits is the number b[i:i+2] writes in decimal, -1 if it is not two
// digits.
func twoDigits(b []byte, i int) int {
	c0, c1 := b[i]-'0', b[i+1]-'0'
	if c0 > 9 || c1 > 9 {
		return -1
	}
	return int(c0)*10 + int(c1)
}

// StringMap reads an object of strings (labels, annotations). Its keys,
// which objects of a kind repeat, come from SharedString's table; its
// values, when they need no unescaping and are few, come in one allocation,
// parts of one string (the map's own).
func (d *Decoder) StringMap() (map[string]string, error) {
	start := d.i
	var spans [stringMapBatch]struct {
		key  string
		s, e int
	}
	n, size := 0, 0
	err := d.Members(func(key []byte) error { // (valid UTF-8: key declines any other)
		s, e, plain, err := d.stringSpan()
		if err != nil {
			return err
		}
		if !plain || n == len(spans) {
			return errUnbatched
		}
		spans[n].key, spans[n].s, spans[n].e = internKey(key), s, e
		n++
		size += e - s
		return nil
	})
	if err == errUnbatched {
		d.i = start
		return d.stringMap()
	}
	if err != nil {
		return nil, err
	}
	var all strings.Builder
	all.Grow(size)
	for _, sp := range spans[:n] {
		all.Write(d.b[sp.s:sp.e])
	}
	m := make(map[string]string, n)
	values, at := all.String(), 0
	for _, sp := range spans[:n] { // in order: of a key given twice, the last
		m[sp.key] = values[at : at+sp.e-sp.s]
		at += sp.e - sp.s
	}
	return m, nil
}

// stringMapBatch bounds the values StringMap makes in one allocation.
const stringMapBatch = 16

var errUnbatched = errors.New("metajson: not one allocation")

// stringMap is StringMap a value at a time.
func (d *Decoder) stringMap() (map[string]string, error) {
	m := map[string]string{}
	err := d.Members(func(key []byte) error {
		v, err := d.String()
		m[internKey(key)] = v
		return err
	})
	return m, err
}

// internKey is a map key: from SharedString's table when it is short.
func internKey(key []byte) string {
	if len(key) <= sharedMax {
		return intern(key)
	}
	return string(key)
}

// Strings reads an array of strings (finalizers: a few names, repeated,
// shared as SharedString shares them).
func (d *Decoder) Strings() ([]string, error) {
	s := []string{}
	err := d.Elements(func() error {
		v, err := d.SharedString()
		s = append(s, v)
		return err
	})
	return s, err
}

var ownerReferenceFields = []string{"apiVersion", "kind", "name", "uid", "controller", "blockOwnerDeletion"}

// OwnerReferences reads an array of metav1.OwnerReference
// (metadata.ownerReferences) as Plain reads it into a fresh field: an
// empty array is an empty slice, a null element a zero one, a null member
// leaves its field zero (controller and blockOwnerDeletion nil). A key in
// another case than the field's is not the field (Plain matches keys
// case-sensitively) and is skipped, but "apiVersion" or "kind" in another
// case declines (Fields, as for TypeMeta).
func (d *Decoder) OwnerReferences() ([]metav1.OwnerReference, error) {
	return objects(d, ownerReferenceFields, func(r *metav1.OwnerReference, n int) (err error) {
		switch n {
		case 0:
			r.APIVersion, err = d.SharedString()
		case 1:
			r.Kind, err = d.SharedString()
		case 2:
			r.Name, err = d.String()
		case 3:
			var uid string
			uid, err = d.String()
			r.UID = types.UID(uid)
		case 4:
			r.Controller, err = d.BoolPtr()
		case 5:
			r.BlockOwnerDeletion, err = d.BoolPtr()
		}
		return err
	})
}

// BoolPtr reads true or false into a new bool (null is the caller's: see
// Fields).
func (d *Decoder) BoolPtr() (*bool, error) {
	var v bool
	switch {
	case d.literal("true"):
		v = true
	case d.literal("false"):
	default:
		return nil, ErrDecline
	}
	return &v, nil
}

var conditionFields = []string{"type", "status", "observedGeneration", "lastTransitionTime", "reason", "message"}

// Conditions reads an array of metav1.Condition (an API type's
// status.conditions) as Plain reads it into a fresh field: an empty array
// is an empty slice, a null element a zero one, a null member leaves its
// field zero. Type, status and reason are SharedStrings: a few values, the
// same in every object.
func (d *Decoder) Conditions() ([]metav1.Condition, error) {
	return objects(d, conditionFields, func(c *metav1.Condition, n int) (err error) {
		switch n {
		case 0:
			c.Type, err = d.SharedString()
		case 1:
			var status string
			status, err = d.SharedString()
			c.Status = metav1.ConditionStatus(status)
		case 2:
			c.ObservedGeneration, err = d.Int64()
		case 3:
			err = d.Time(&c.LastTransitionTime)
		case 4:
			c.Reason, err = d.SharedString()
		case 5:
			c.Message, err = d.String()
		}
		return err
	})
}

// objects reads an array of objects whose fields are names, as Plain reads
// it into a fresh field: an empty array is an empty slice, a null element a
// zero one; field reads field n of an element, a fresh T. The element
// lives in the slice, which moves as it grows: field must not keep e
// (StringTo would).
func objects[T any](d *Decoder, names []string, field func(e *T, n int) error) ([]T, error) {
	s := []T{}
	err := d.Elements(func() error {
		var zero T
		s = append(s, zero)
		if d.Null() {
			return nil
		}
		e := &s[len(s)-1]
		return d.Fields(names, func(n int) error { return field(e, n) })
	})
	return s, err
}
