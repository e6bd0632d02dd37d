package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/gpuvm/gpuvm/pkg/api"
)

// Every JSON body the API reads goes through readBody, then decodeJSON (or
// decodeOptionalJSON): at most api.MaxRequestBytes, one JSON value and
// nothing after it, no key twice in one object at any depth, at most
// maxJSONDepth levels of nesting, then no unknown fields and the fields'
// types. A refusal is a 400 (413 for a body too large) that names the field.

// maxJSONDepth bounds the nesting of a body: the API's deepest body
// (a reservation's recurrence days) has three levels.
const maxJSONDepth = 32

// bodyKey keeps a body that readBody read and checked, so that a handler
// that looks at it before decoding (decodeTimes) reads it once.
const bodyKey = "gpuvm.body"

// jsonFault is what checkJSON finds wrong with a body: a JSON pointer
// (RFC 6901) to where, and what.
type jsonFault struct {
	Pointer string
	Detail  string
}

func (e *jsonFault) Error() string { return e.Detail }

// frame is one open object or array of checkJSON's walk.
type frame struct {
	object bool
	keys   map[string]bool
	key    string // the object's key whose value comes next
	index  int    // the array's next element
	isKey  bool   // the object's next token is a key
}

// checkJSON walks a body's tokens: one value, no key twice in an object,
// at most maxJSONDepth levels, nothing after the value.
func checkJSON(body []byte) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var stack, frames []*frame // frames: every frame made, by depth
	pointer := func() string {
		var b strings.Builder
		for _, f := range stack {
			b.WriteByte('/')
			if f.object {
				b.WriteString(escapePointer(f.key))
			} else {
				b.WriteString(strconv.Itoa(f.index))
			}
		}
		return b.String()
	}
	// value notes that a value ended in the innermost open object or
	// array.
	value := func() {
		if len(stack) == 0 {
			return
		}
		f := stack[len(stack)-1]
		if f.object {
			f.isKey = true
		} else {
			f.index++
		}
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			if errors.Is(err, io.EOF) {
				if len(stack) > 0 {
					return &jsonFault{Pointer: pointer(), Detail: "the body is not valid JSON: it ends inside a value"}
				}
				return io.EOF // empty
			}
			return &jsonFault{Pointer: pointer(), Detail: "the body is not valid JSON: " + err.Error()}
		}
		if len(stack) > 0 {
			if f := stack[len(stack)-1]; f.object && f.isKey {
				if k, ok := tok.(string); ok {
					if f.keys[k] {
						f.key = k
						return &jsonFault{Pointer: pointer(), Detail: fmt.Sprintf("the key %q appears twice in one object", k)}
					}
					f.keys[k], f.key, f.isKey = true, k, false
					continue
				}
			}
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) == maxJSONDepth {
				return &jsonFault{Pointer: pointer(), Detail: fmt.Sprintf("the body nests deeper than %d levels", maxJSONDepth)}
			}
			obj := tok == json.Delim('{')
			// The frames (and their key sets) of closed values are used
			// again: a body of many small objects makes no garbage.
			if len(stack) < len(frames) {
				f := frames[len(stack)]
				clear(f.keys)
				f.object, f.key, f.index, f.isKey = obj, "", 0, obj
				stack = append(stack, f)
			} else {
				f := &frame{object: obj, keys: map[string]bool{}, isKey: obj}
				frames = append(frames, f)
				stack = append(stack, f)
			}
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		value()
		if len(stack) == 0 {
			break
		}
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return &jsonFault{Detail: "the body has more after its JSON value; send one JSON object"}
	}
	return nil
}

// escapePointer escapes a key for a JSON pointer.
func escapePointer(k string) string {
	return strings.ReplaceAll(strings.ReplaceAll(k, "~", "~0"), "/", "~1")
}

// pointerField names the field a JSON pointer points at as the API's
// problems name fields: "name" for /name, "recurrence.until" for
// /recurrence/until, "ssh_keys[0]" for /ssh_keys/0 (the root is "").
func pointerField(p string) string {
	if p == "" {
		return ""
	}
	var b strings.Builder
	for _, part := range strings.Split(p[1:], "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		if _, err := strconv.Atoi(part); err == nil && b.Len() > 0 {
			b.WriteString("[" + part + "]")
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('.')
		}
		b.WriteString(part)
	}
	return b.String()
}

// readBody reads the request's body (at most api.MaxRequestBytes) and
// checks its JSON form (checkJSON). An empty body is returned empty when
// optional, else refused. On a refusal it answers and reports false.
func (s *Server) readBody(c *gin.Context, optional bool) ([]byte, bool) {
	if b, ok := c.Get(bodyKey); ok {
		return b.([]byte), true
	}
	body, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, api.MaxRequestBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		s.writeProblem(c, with(errTooLarge, fmt.Sprintf("the body may have at most %d bytes", api.MaxRequestBytes)))
		return nil, false
	case isTimeout(err):
		s.log.Info("request body too slow", "method", c.Request.Method, "path", c.Request.URL.Path, "remote", c.ClientIP(), "limit", s.HTTP.BodyTimeout)
		c.Header("Connection", "close")
		s.writeProblem(c, with(errTimeout, fmt.Sprintf("the body did not come within %s", s.HTTP.BodyTimeout)))
		return nil, false
	case err != nil:
		s.log.Info("request body not read", "method", c.Request.Method, "path", c.Request.URL.Path, "err", err)
		s.writeProblem(c, with(errBadRequest, "the body could not be read: "+err.Error()))
		return nil, false
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if optional {
			c.Set(bodyKey, []byte{})
			return []byte{}, true
		}
		s.writeProblem(c, with(errBadRequest, "the body is empty; send a JSON object"))
		return nil, false
	}
	var fault *jsonFault
	switch err := checkJSON(body); {
	case errors.As(err, &fault):
		s.writeProblem(c, withField(errBadRequest, pointerField(fault.Pointer), fault.Detail))
		return nil, false
	case err != nil:
		s.writeProblem(c, with(errBadRequest, "the body is not valid JSON: "+err.Error()))
		return nil, false
	}
	c.Set(bodyKey, body)
	return body, true
}

// decodeJSON reads a JSON body strictly (readBody) into v: no unknown
// fields, each of the type v has.
func (s *Server) decodeJSON(c *gin.Context, v any) bool {
	body, ok := s.readBody(c, false)
	return ok && s.decodeBody(c, body, v)
}

// decodeOptionalJSON is decodeJSON for a body that may be absent: an empty
// body leaves v as it is.
func (s *Server) decodeOptionalJSON(c *gin.Context, v any) bool {
	body, ok := s.readBody(c, true)
	return ok && (len(body) == 0 || s.decodeBody(c, body, v))
}

// decodeBody decodes a body readBody checked.
func (s *Server) decodeBody(c *gin.Context, body []byte, v any) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case err == nil:
		return true
	case errors.As(err, &typeErr):
		field := typeErr.Field
		detail := fmt.Sprintf("%s must be a JSON %s", field, typeErr.Type)
		if field == "" {
			detail = fmt.Sprintf("the body must be a JSON %s, not a %s", typeErr.Type, typeErr.Value)
		} else if strings.HasPrefix(typeErr.Value, "number") && isNumberKind(typeErr.Type.String()) {
			detail = fmt.Sprintf("%s must be a whole number in range (%s)", field, typeErr.Value)
		}
		s.writeProblem(c, withField(errBadRequest, field, detail))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		f := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		s.writeProblem(c, withField(errBadRequest, f, "unknown field "+strconv.Quote(f)))
	case errors.As(err, &syntaxErr):
		s.writeProblem(c, with(errBadRequest, "the body is not valid JSON: "+err.Error()))
	default:
		// A time that does not parse, a value a type refuses: encoding/json
		// does not say which field, so it is found by decoding one at a
		// time.
		field := blameField(body, reflect.TypeOf(v))
		s.writeProblem(c, withField(errBadRequest, field, fmt.Sprintf("%s is not valid: %s", cmpOr(field, "the body"), strings.TrimPrefix(err.Error(), "json: "))))
	}
	return false
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// blameField is the field of a JSON object whose value t refuses: each key
// (in name order) is decoded alone into a new t, and the first that fails
// is the field, followed into objects ("recurrence.until"). "" when none
// fails alone.
func blameField(body []byte, t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return ""
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(body, &top) != nil {
		return ""
	}
	keys := make([]string, 0, len(top))
	for k := range top {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		one, _ := json.Marshal(map[string]json.RawMessage{k: top[k]})
		if json.Unmarshal(one, reflect.New(t).Interface()) == nil {
			continue
		}
		if f, ok := jsonField(t, k); ok {
			if sub := blameField(top[k], f.Type); sub != "" {
				return k + "." + sub
			}
		}
		return k
	}
	return ""
}

// jsonField is the field of struct type t that JSON key k decodes into.
func jsonField(t reflect.Type, k string) (reflect.StructField, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		if strings.EqualFold(name, k) {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func isNumberKind(t string) bool {
	switch t {
	case "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "float32", "float64":
		return true
	}
	return false
}

// checkQuery refuses, for every route, a request whose query does not
// parse as url.ParseQuery parses it: a ';' (which Go's parser drops the
// parameter at, so that "?hours=1;DROP" would read as no hours at all) or
// a bad percent-encoding. The refusal is a 400 naming the parameter, or
// "query" when its name cannot be read.
func (s *Server) checkQuery(c *gin.Context) {
	if field, detail, bad := queryFault(c.Request.URL.RawQuery); bad {
		s.writeProblem(c, withField(errBadRequest, field, detail))
		return
	}
	c.Next()
}

// queryFault says which parameter of a raw query does not parse, and why.
func queryFault(raw string) (field, detail string, bad bool) {
	for part := range strings.SplitSeq(raw, "&") {
		if part == "" {
			continue
		}
		rawKey, rawVal, _ := strings.Cut(part, "=")
		key, keyErr := url.QueryUnescape(rawKey)
		field = key
		if keyErr != nil || strings.Contains(key, ";") || field == "" {
			field = "query"
		}
		switch {
		case strings.Contains(part, ";"):
			return clip(field, 100), fmt.Sprintf("the query parameter %q has a ';': separate parameters with '&', and percent-encode a ';' in a value (%%3B)", clip(part, 100)), true
		case keyErr != nil:
			return field, fmt.Sprintf("the query parameter name %q is not valid percent-encoding", clip(rawKey, 100)), true
		}
		if _, err := url.QueryUnescape(rawVal); err != nil {
			return clip(field, 100), fmt.Sprintf("the value of query parameter %q is not valid percent-encoding (%q)", clip(key, 100), clip(rawVal, 100)), true
		}
	}
	if _, err := url.ParseQuery(raw); err != nil { // what the parser refuses besides
		return "query", "the query does not parse: " + err.Error(), true
	}
	return "", "", false
}
