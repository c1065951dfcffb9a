package upstream

import (
	"bytes"
	"errors"

	"github.com/costguard/costguard/internal/jsontext"
)

// errNotObject is a response that is not one JSON object.
var errNotObject = errors.New("not a JSON object")

// responseMembers returns the values of the members of the JSON object
// raw, as sub-slices of raw: data, errors and extensions, nil when absent
// (a member given twice: the last, as encoding/json decodes it). raw is
// checked and its members found in one walk (jsontext.Members,
// encoding/json's grammar), without a decoder: a response can be
// megabytes, and its data is only handed on, never decoded here.
func responseMembers(raw []byte) (data, errs, ext []byte, err error) {
	var buf [4]jsontext.Member
	members, status := jsontext.Members(raw, buf[:0], jsontext.Limits{Keep: keepResponseMember, Count: [][]byte{}})
	if status != jsontext.Object {
		return nil, nil, nil, errNotObject
	}
	for i := range members {
		v := raw[members[i].Start:members[i].End]
		switch string(members[i].Key()) {
		case "data":
			data = v
		case "errors":
			errs = v
		case "extensions":
			ext = v
		}
	}
	return data, errs, ext, nil
}

// keepResponseMember keeps the members responseMembers reads (a name with
// an escape is decoded to tell), so that a response's other members cost
// no memory however many it has.
func keepResponseMember(name []byte) bool {
	switch string(name) {
	case "data", "errors", "extensions":
		return true
	}
	return bytes.IndexByte(name, '\\') >= 0
}
