package main

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Row is one line of the values table.
type Row struct {
	Key         string // dotted path, e.g. cassandra.tls.secretName
	Type        string // from the schema, e.g. "string: one of `self`, `certManager`"
	Default     string // the value in values.yaml, in YAML flow style; empty for a parent row
	Description string // the comment above the key in values.yaml, else the schema's description
}

// schema is one node of a JSON schema, as decoded by encoding/json.
type schema = map[string]any

// Rows returns the table's rows in the order of values.yaml. It fails on a key of values.yaml
// that the schema does not describe, on a $ref outside "#/definitions/", and on input that does
// not parse. It does not validate the values against the schema.
func Rows(valuesYAML, schemaJSON []byte) ([]Row, error) {
	var root schema
	if err := json.Unmarshal(schemaJSON, &root); err != nil {
		return nil, fmt.Errorf("values.schema.json: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(valuesYAML, &doc); err != nil {
		return nil, fmt.Errorf("values.yaml: %w", err)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("values.yaml: the document is not a mapping")
	}
	w := walker{defs: definitions(root)}
	if err := w.mapping("", doc.Content[0], root); err != nil {
		return nil, err
	}
	return w.rows, nil
}

// walker collects rows while it descends values.yaml beside the schema.
type walker struct {
	defs map[string]schema
	rows []Row
}

// mapping adds the rows of the keys of node, a mapping whose schema s lists its properties.
func (w *walker) mapping(prefix string, node *yaml.Node, s schema) error {
	props, err := w.properties(s)
	if err != nil {
		return err
	}
	for i := 0; i+1 < len(node.Content); i += 2 {
		key, value := node.Content[i], node.Content[i+1]
		path := prefix + key.Value
		ps, ok := props[key.Value]
		if !ok {
			return fmt.Errorf("values.yaml: key %s is not in values.schema.json (helm would refuse it): add it to the schema", path)
		}
		resolved, err := w.resolve(ps)
		if err != nil {
			return fmt.Errorf("values.schema.json, %s: %w", path, err)
		}
		desc := comment(key.HeadComment)
		if desc == "" {
			desc, _ = ps["description"].(string)
		}
		childProps, err := w.properties(resolved)
		if err != nil {
			return fmt.Errorf("values.schema.json, %s: %w", path, err)
		}
		if value.Kind == yaml.MappingNode && len(value.Content) > 0 && len(childProps) > 0 {
			if desc != "" {
				w.rows = append(w.rows, Row{Key: path, Type: "object", Description: desc})
			}
			if err := w.mapping(path+".", value, resolved); err != nil {
				return err
			}
			continue
		}
		typ, err := w.typeText(ps)
		if err != nil {
			return fmt.Errorf("values.schema.json, %s: %w", path, err)
		}
		w.rows = append(w.rows, Row{Key: path, Type: typ, Default: flow(value), Description: desc})
	}
	return nil
}

// definitions returns the schema's "definitions" by name.
func definitions(root schema) map[string]schema {
	defs := map[string]schema{}
	if d, ok := root["definitions"].(map[string]any); ok {
		for name, v := range d {
			if s, ok := v.(map[string]any); ok {
				defs[name] = s
			}
		}
	}
	return defs
}

// resolve follows s's $ref, if any, to its definition.
func (w *walker) resolve(s schema) (schema, error) {
	ref, ok := s["$ref"].(string)
	if !ok {
		return s, nil
	}
	name, ok := strings.CutPrefix(ref, "#/definitions/")
	if !ok {
		return nil, fmt.Errorf("$ref %q: only #/definitions/ is supported", ref)
	}
	d, ok := w.defs[name]
	if !ok {
		return nil, fmt.Errorf("$ref %q: no such definition", ref)
	}
	return d, nil
}

// properties returns the properties s lists, its allOf members' included.
func (w *walker) properties(s schema) (map[string]schema, error) {
	s, err := w.resolve(s)
	if err != nil {
		return nil, err
	}
	props := map[string]schema{}
	if p, ok := s["properties"].(map[string]any); ok {
		for k, v := range p {
			if ps, ok := v.(map[string]any); ok {
				props[k] = ps
			}
		}
	}
	all, _ := s["allOf"].([]any)
	for _, m := range all {
		ms, ok := m.(map[string]any)
		if !ok {
			continue
		}
		sub, err := w.properties(ms)
		if err != nil {
			return nil, err
		}
		for k, v := range sub {
			if _, seen := props[k]; !seen {
				props[k] = v
			}
		}
	}
	return props, nil
}

// typeText describes what s accepts in a few words: its type, allowed values, range, and the
// description of a definition it refers to. Patterns are left out.
func (w *walker) typeText(s schema) (string, error) {
	r, err := w.resolve(s)
	if err != nil {
		return "", err
	}
	if enum, ok := r["enum"].([]any); ok {
		return "one of " + literals(enum), nil
	}
	if c, ok := r["const"]; ok {
		return literals([]any{c}), nil
	}
	var text string
	switch t, _ := r["type"].(string); t {
	case "array":
		text = "list"
		if items, ok := r["items"].(map[string]any); ok {
			it, err := w.typeText(items)
			if err != nil {
				return "", err
			}
			if it != "" {
				text = "list of " + it
			}
		}
	case "object":
		text = "map"
		if ap, ok := r["additionalProperties"].(map[string]any); ok {
			if at, _ := ap["type"].(string); at != "" {
				text = "map of " + at
			}
		}
	case "integer", "number":
		text = strings.TrimSpace(t + " " + rangeText(r))
	default:
		text = t
	}
	if text == "" {
		text = rangeText(r)
	}
	var alts []string
	for _, k := range []string{"oneOf", "anyOf"} {
		list, _ := r[k].([]any)
		for _, a := range list {
			as, ok := a.(map[string]any)
			if !ok {
				continue
			}
			at, err := w.typeText(as)
			if err != nil {
				return "", err
			}
			if at != "" {
				alts = append(alts, at)
			}
		}
	}
	if len(alts) > 0 {
		if text != "" {
			text += ": "
		}
		text += strings.Join(alts, " or ")
	}
	if _, isRef := s["$ref"]; isRef {
		if d, _ := r["description"].(string); d != "" {
			text += " (" + d + ")"
		}
	}
	return text, nil
}

// rangeText renders minimum and maximum, e.g. "1024–65535" or "≥ 1"; empty without either.
func rangeText(s schema) string {
	lo, hasLo := s["minimum"].(float64)
	hi, hasHi := s["maximum"].(float64)
	num := func(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
	switch {
	case hasLo && hasHi:
		return num(lo) + "–" + num(hi)
	case hasLo:
		return "≥ " + num(lo)
	case hasHi:
		return "≤ " + num(hi)
	}
	return ""
}

// literals renders schema values as code spans, comma-separated.
func literals(vs []any) string {
	out := make([]string, 0, len(vs))
	for _, v := range vs {
		b, _ := json.Marshal(v)
		s := string(b)
		if str, ok := v.(string); ok {
			s = str
		}
		out = append(out, "`"+s+"`")
	}
	return strings.Join(out, ", ")
}

// comment turns a YAML head comment into one line of Markdown. Lines indented beyond "# " (lists,
// examples) start on a line of their own and keep their indentation.
func comment(c string) string {
	if c == "" {
		return ""
	}
	var b strings.Builder
	for i, line := range strings.Split(c, "\n") {
		line = strings.TrimPrefix(strings.TrimPrefix(line, "#"), " ")
		indent := len(line) - len(strings.TrimLeft(line, " "))
		switch {
		case i == 0:
		case indent > 0:
			b.WriteString("<br>" + strings.Repeat("&nbsp;", indent))
		default:
			b.WriteString(" ")
		}
		b.WriteString(strings.TrimLeft(line, " "))
	}
	return b.String()
}

// flow renders a value of values.yaml in YAML flow style on one line, without its comments.
func flow(n *yaml.Node) string {
	if n.Kind == yaml.ScalarNode {
		if n.Value == "" || n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle) != 0 {
			return strconv.Quote(n.Value)
		}
		return n.Value
	}
	c := plain(n)
	out, err := yaml.Marshal(c)
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(out))
}

// plain returns a deep copy of n in flow style with every comment removed.
func plain(n *yaml.Node) *yaml.Node {
	c := *n
	c.HeadComment, c.LineComment, c.FootComment = "", "", ""
	if c.Kind == yaml.MappingNode || c.Kind == yaml.SequenceNode {
		c.Style = yaml.FlowStyle
	}
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, k := range n.Content {
		c.Content[i] = plain(k)
	}
	return &c
}

// Table renders rows as a Markdown table, each line ending in a newline.
func Table(rows []Row) []byte {
	var b strings.Builder
	b.WriteString("| Key | Type | Default | Description |\n|---|---|---|---|\n")
	for _, r := range rows {
		def := ""
		if r.Default != "" {
			def = "`" + r.Default + "`"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", r.Key, cell(r.Type), cell(def), cell(r.Description))
	}
	return []byte(b.String())
}

// cell escapes what would end a table cell.
func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}
