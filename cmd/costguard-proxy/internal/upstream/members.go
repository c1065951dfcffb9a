package upstream

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/costguard/costguard/internal/jsontext"
)

// errNotObject is a response that is not one JSON object.
var errNotObject = errors.New("not a JSON object")

// responseMembers returns the values of the members of the JSON object
// raw, as sub-slices of raw: data, errors and extensions, nil when absent
// (a member given twice: the last, as encoding/json decodes it). raw is
// checked once (jsontext.Valid, encoding/json's grammar) and then walked
// without a decoder: a response can be megabytes, and its data is only
// handed on, never decoded here.
func responseMembers(raw []byte) (data, errs, ext []byte, err error) {
	if !jsontext.Valid(raw) {
		return nil, nil, nil, errNotObject
	}
	i := skipSpace(raw, 0)
	if raw[i] != '{' {
		return nil, nil, nil, errNotObject
	}
	for i = skipSpace(raw, i+1); raw[i] != '}'; {
		keyEnd := stringEnd(raw, i)
		key := raw[i+1 : keyEnd-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			var k string
			_ = json.Unmarshal(raw[i:keyEnd], &k) // valid: Valid said so
			key = []byte(k)
		}
		start := skipSpace(raw, skipSpace(raw, keyEnd)+1) // past the colon
		end := valueEnd(raw, start)
		switch string(key) {
		case "data":
			data = raw[start:end]
		case "errors":
			errs = raw[start:end]
		case "extensions":
			ext = raw[start:end]
		}
		if i = skipSpace(raw, end); raw[i] == ',' {
			i = skipSpace(raw, i+1)
		}
	}
	return data, errs, ext, nil
}

// skipSpace returns the index of the first byte of b at or after i that
// is not JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// stringEnd returns the index just past the string of valid JSON b that
// opens at i.
func stringEnd(b []byte, i int) int {
	for i++; ; {
		i = jsontext.PlainEnd(b, i)
		switch b[i] {
		case '"':
			return i + 1
		case '\\':
			i += 2 // the escaped byte; \uXXXX's digits are plain
		default:
			i++ // a byte PlainEnd stops at but a string may hold (valid JSON has none)
		}
	}
}

// valueEnd returns the index just past the value of valid JSON b that
// starts at i.
func valueEnd(b []byte, i int) int {
	switch b[i] {
	case '"':
		return stringEnd(b, i)
	case '{', '[':
		depth := 0
		for {
			switch b[i] {
			case '"':
				i = stringEnd(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
	}
	for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ']' && b[i] != ' ' && b[i] != '\t' && b[i] != '\n' && b[i] != '\r' {
		i++
	}
	return i
}
