package main

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
)

// unroutedKey is the document's extension listing the answers to requests that match no route.
const unroutedKey = "x-unrouted-responses"

// commonHeaders are on every JSON answer; the page says so once instead of on each answer.
var commonHeaders = []string{"Cache-Control", "X-Content-Type-Options"}

// methodOrder is the order of an operation's methods on the page.
var methodOrder = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"}

// load reads and validates the OpenAPI document at path.
func load(ctx context.Context, path string) (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	loader.Context = ctx
	doc, err := loader.LoadFromFile(path)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	if err := doc.Validate(ctx); err != nil {
		return nil, fmt.Errorf("%s is not a valid OpenAPI document: %w", path, err)
	}
	return doc, nil
}

// page accumulates the Markdown text.
type page struct{ bytes.Buffer }

func (p *page) line(format string, args ...any) {
	fmt.Fprintf(p, format, args...)
	p.WriteByte('\n')
}

// operation is one method of one path.
type operation struct {
	method, path string
	op           *openapi3.Operation
}

// render returns the Markdown page for doc, read from the file src.
func render(doc *openapi3.T, src string) ([]byte, error) {
	var p page
	base := filepath.Base(src)
	p.line("<!-- Generated from %s by `make api-docs` (hack/apidoc). Do not edit: edit the document and run make api-docs. -->", base)
	p.line("")
	p.line("# %s (%s)", doc.Info.Title, doc.Info.Version)
	p.line("")
	p.line("%s", strings.TrimSpace(doc.Info.Description))
	p.line("")
	p.line("The machine-readable reference is [%s](%s) (OpenAPI %s). `internal/sidecarapi`'s tests check every request and answer of the handler's tests against it.", base, base, doc.OpenAPI)
	p.line("")
	for _, s := range doc.Servers {
		p.line("- `%s`: %s", s.URL, s.Description)
	}
	p.line("")

	ops, err := operationsByTag(doc)
	if err != nil {
		return nil, err
	}
	p.line("## Routes")
	p.line("")
	p.line("| method | path | what it does |")
	p.line("|---|---|---|")
	for _, tag := range doc.Tags {
		for _, o := range ops[tag.Name] {
			p.line("| `%s` | [`%s`](#%s) | %s |", o.method, o.path, slug(o.method+" "+o.path), cell(o.op.Summary))
		}
	}
	p.line("")
	p.line("Every JSON answer carries `Cache-Control: no-store` and `X-Content-Type-Options: nosniff`; the tables below name other headers.")
	p.line("")
	for _, tag := range doc.Tags {
		p.line("## %s", tag.Name)
		p.line("")
		p.line("%s", strings.TrimSpace(tag.Description))
		p.line("")
		for _, o := range ops[tag.Name] {
			renderOperation(&p, o)
		}
	}
	if err := renderUnrouted(&p, doc); err != nil {
		return nil, err
	}
	renderSchemas(&p, doc)
	return bytes.TrimRight(p.Bytes(), "\n"), nil
}

// operationsByTag returns the operations of doc under their one tag, each tag's in path order
// and, for one path, in methodOrder.
func operationsByTag(doc *openapi3.T) (map[string][]operation, error) {
	known := map[string]bool{}
	for _, t := range doc.Tags {
		known[t.Name] = true
	}
	byTag := map[string][]operation{}
	paths := doc.Paths.Map()
	for _, path := range slices.Sorted(mapKeys(paths)) {
		ops := paths[path].Operations()
		for _, method := range methodOrder {
			op := ops[method]
			if op == nil {
				continue
			}
			if len(op.Tags) != 1 || !known[op.Tags[0]] {
				return nil, fmt.Errorf("%s %s: every operation needs exactly one tag from the document's tags, got %v", method, path, op.Tags)
			}
			byTag[op.Tags[0]] = append(byTag[op.Tags[0]], operation{method, path, op})
		}
	}
	return byTag, nil
}

func renderOperation(p *page, o operation) {
	p.line("### %s %s", o.method, o.path)
	p.line("")
	p.line("%s", strings.TrimSpace(o.op.Summary))
	p.line("")
	if d := strings.TrimSpace(o.op.Description); d != "" {
		p.line("%s", d)
		p.line("")
	}
	if len(o.op.Parameters) > 0 {
		p.line("| parameter | in | type | required | description |")
		p.line("|---|---|---|---|---|")
		for _, ref := range o.op.Parameters {
			prm := ref.Value
			p.line("| `%s` | %s | %s | %s | %s |", prm.Name, prm.In, cell(typeOf(prm.Schema)), yesNo(prm.Required), cell(prm.Description))
		}
		p.line("")
	}
	if rb := o.op.RequestBody; rb != nil && rb.Value != nil {
		for _, ct := range slices.Sorted(mapKeys(rb.Value.Content)) {
			need := "optional"
			if rb.Value.Required {
				need = "required"
			}
			p.line("Request body (`%s`, %s): %s", ct, need, typeOf(rb.Value.Content[ct].Schema))
			p.line("")
		}
	}
	renderResponses(p, o.op.Responses.Map())
}

// renderResponses renders a table of answers by status.
func renderResponses(p *page, responses map[string]*openapi3.ResponseRef) {
	p.line("| status | body | description |")
	p.line("|---|---|---|")
	for _, status := range sortedStatuses(responses) {
		r := responses[status].Value
		body := "none"
		for _, ct := range slices.Sorted(mapKeys(r.Content)) {
			body = fmt.Sprintf("`%s` %s", ct, typeOf(r.Content[ct].Schema))
		}
		var extra []string
		for _, h := range slices.Sorted(mapKeys(r.Headers)) {
			if !slices.Contains(commonHeaders, h) {
				extra = append(extra, fmt.Sprintf("header `%s`", h))
			}
		}
		if len(extra) > 0 {
			body += "; " + strings.Join(extra, ", ")
		}
		desc := ""
		if r.Description != nil {
			desc = *r.Description
		}
		p.line("| %s | %s | %s |", status, cell(body), cell(desc))
	}
	p.line("")
}

// renderUnrouted renders the answers of the x-unrouted-responses extension.
func renderUnrouted(p *page, doc *openapi3.T) error {
	ext, ok := doc.Extensions[unroutedKey].(map[string]any)
	if !ok {
		return fmt.Errorf("the document has no %s map", unroutedKey)
	}
	responses := map[string]*openapi3.ResponseRef{}
	for status, name := range ext {
		n, _ := name.(string)
		ref := doc.Components.Responses[n]
		if ref == nil || ref.Value == nil {
			return fmt.Errorf("%s: %s names %q, which is not a component response", unroutedKey, status, name)
		}
		responses[status] = ref
	}
	p.line("## Requests that match no route")
	p.line("")
	p.line("A request for a path or method the routes above do not have, and a request Go's HTTP server cannot parse, gets one of these answers (`%s` in the document).", unroutedKey)
	p.line("")
	renderResponses(p, responses)
	return nil
}

// renderSchemas renders the component schemas, by name.
func renderSchemas(p *page, doc *openapi3.T) {
	p.line("## Schemas")
	p.line("")
	for _, name := range slices.Sorted(mapKeys(doc.Components.Schemas)) {
		s := doc.Components.Schemas[name].Value
		p.line("### %s", name)
		p.line("")
		summary := typeOf(&openapi3.SchemaRef{Value: s})
		if d := strings.TrimSpace(s.Description); d != "" {
			p.line("%s", d)
			p.line("")
		}
		if len(s.Properties) == 0 {
			p.line("Type: %s.", summary)
			p.line("")
			continue
		}
		if s.Nullable {
			p.line("An object, or `null`.")
			p.line("")
		}
		p.line("| field | type | required | description |")
		p.line("|---|---|---|---|")
		for _, f := range fieldOrder(s) {
			prop := s.Properties[f]
			p.line("| `%s` | %s | %s | %s |", f, cell(typeOf(prop)), yesNo(slices.Contains(s.Required, f)), cell(describe(prop)))
		}
		if s.AdditionalProperties.Has != nil && !*s.AdditionalProperties.Has {
			p.line("")
			p.line("No other fields.")
		}
		p.line("")
	}
}

// fieldOrder is the required fields in their declared order, then the others by name.
func fieldOrder(s *openapi3.Schema) []string {
	order := slices.Clone(s.Required)
	for _, f := range slices.Sorted(mapKeys(s.Properties)) {
		if !slices.Contains(order, f) {
			order = append(order, f)
		}
	}
	return order
}

// describe is a property's description, or that of the schema it refers to.
func describe(ref *openapi3.SchemaRef) string {
	if ref == nil || ref.Value == nil {
		return ""
	}
	if ref.Ref == "" && ref.Value.Description != "" {
		return ref.Value.Description
	}
	return ""
}

// typeOf renders a schema's type in a line: a link for a named schema, and the constraints of an
// inline one.
func typeOf(ref *openapi3.SchemaRef) string {
	if ref == nil || ref.Value == nil {
		return "any"
	}
	if name, ok := strings.CutPrefix(ref.Ref, "#/components/schemas/"); ok {
		return fmt.Sprintf("[%s](#%s)", name, slug(name))
	}
	s := ref.Value
	var parts []string
	switch {
	case len(s.AllOf) > 0:
		var refs, more []string
		for _, sub := range s.AllOf {
			if sub.Ref != "" {
				refs = append(refs, typeOf(sub))
				continue
			}
			more = append(more, constraints(sub.Value)...)
		}
		t := strings.Join(refs, " and ")
		if len(more) > 0 {
			t += " with " + strings.Join(more, ", ")
		}
		parts = append(parts, t)
	case s.Type.Is("array"):
		parts = append(parts, "array of "+typeOf(s.Items))
	case len(s.Enum) > 0:
		parts = append(parts, enumList(s.Enum))
	case s.Type != nil && len(*s.Type) > 0:
		t := (*s.Type)[0]
		if s.Format != "" {
			t += " (" + s.Format + ")"
		}
		parts = append(parts, t)
	default:
		parts = append(parts, "any")
	}
	parts = append(parts, bounds(s)...)
	if s.Nullable {
		parts = append(parts, "or `null`")
	}
	return strings.Join(parts, ", ")
}

// constraints renders what an inline allOf member adds: required fields and enums of fields.
func constraints(s *openapi3.Schema) []string {
	var out []string
	for _, f := range slices.Sorted(mapKeys(s.Properties)) {
		if p := s.Properties[f].Value; p != nil && len(p.Enum) > 0 {
			out = append(out, fmt.Sprintf("`%s` %s", f, enumList(p.Enum)))
		}
	}
	for _, f := range s.Required {
		out = append(out, fmt.Sprintf("`%s` required", f))
	}
	return out
}

// bounds renders a schema's numeric and length bounds and pattern.
func bounds(s *openapi3.Schema) []string {
	var out []string
	if s.Min != nil {
		out = append(out, "≥ "+strconv.FormatFloat(*s.Min, 'f', -1, 64))
	}
	if s.Max != nil {
		out = append(out, "≤ "+strconv.FormatFloat(*s.Max, 'f', -1, 64))
	}
	if s.MinLength > 0 || s.MaxLength != nil {
		l := fmt.Sprintf("length ≥ %d", s.MinLength)
		if s.MaxLength != nil {
			l = fmt.Sprintf("length %d to %d", s.MinLength, *s.MaxLength)
		}
		out = append(out, l)
	}
	if s.Pattern != "" {
		out = append(out, "pattern `"+s.Pattern+"`")
	}
	return out
}

// enumList renders enum values as `a` | `b`.
func enumList(values []any) string {
	var vs []string
	for _, v := range values {
		vs = append(vs, fmt.Sprintf("`%v`", v))
	}
	return strings.Join(vs, " \\| ")
}

// cell makes text fit one Markdown table cell: one line, pipes escaped (already escaped ones kept).
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	s = strings.ReplaceAll(s, `\|`, "\x00")
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "\x00", `\|`)
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// slugDrop is what GitHub leaves out of a heading's anchor.
var slugDrop = regexp.MustCompile(`[^\p{L}\p{N}\- _]`)

// slug is the anchor GitHub gives a heading.
func slug(heading string) string {
	s := slugDrop.ReplaceAllString(strings.ToLower(heading), "")
	return strings.ReplaceAll(s, " ", "-")
}

// sortedStatuses returns response keys in numeric order, "default" last.
func sortedStatuses[V any](m map[string]V) []string {
	keys := slices.Collect(mapKeysSeq(m))
	slices.SortFunc(keys, func(a, b string) int {
		ai, aerr := strconv.Atoi(a)
		bi, berr := strconv.Atoi(b)
		switch {
		case aerr != nil && berr != nil:
			return strings.Compare(a, b)
		case aerr != nil:
			return 1
		case berr != nil:
			return -1
		}
		return ai - bi
	})
	return keys
}

// mapKeys returns the keys of m, for slices.Sorted.
func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) { return mapKeysSeq(m) }

func mapKeysSeq[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
