package mcpserver

import (
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/mcpbox/mcpbox"
)

// units says what a numeric argument counts, for messages.
var units = map[string]string{"timeout": "seconds", "ttl": "seconds", "depth": "levels"}

// checkArgs checks a call's arguments against the tool's input schema and
// says what is wrong in words a model or a person can act on: "language
// must be one of python, javascript or shell, not \"ruby\"", where the
// schema validator says "[python javascript shell]" or "0/1 is less than
// 1.000000". It covers what the tools' schemas use (required properties,
// unknown properties, types, enums, ranges, patterns and string maps);
// the validator still runs after it, for anything it does not know.
func checkArgs(tool string, s *jsonschema.Schema, args map[string]any) error {
	for _, name := range s.Required {
		if _, ok := args[name]; !ok {
			return argError(tool, name, "%s is required: %s", name, describe(s.Properties[name]))
		}
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range args {
			if !yield(k) {
				return
			}
		}
	})
	for _, name := range names {
		v := args[name]
		p, ok := s.Properties[name]
		if !ok {
			if s.AdditionalProperties != nil && isFalse(s.AdditionalProperties) {
				return argError(tool, name, "%s has no argument %q; it takes %s", tool, name, wordList(propertyNames(s), "and"))
			}
			continue
		}
		if err := checkValue(tool, name, p, v); err != nil {
			return err
		}
	}
	return nil
}

func checkValue(tool, name string, p *jsonschema.Schema, v any) error {
	types := p.Types
	if p.Type != "" {
		types = []string{p.Type}
	}
	if len(types) > 0 && !slices.ContainsFunc(types, func(t string) bool { return hasType(v, t) }) {
		return argError(tool, name, "%s must be %s, not %s", name, wordList(articles(types), "or"), jsonKind(v))
	}
	if len(p.Enum) > 0 && !slices.ContainsFunc(p.Enum, func(e any) bool { return e == v }) {
		var choices []string
		for _, e := range p.Enum {
			choices = append(choices, fmt.Sprint(e))
		}
		return argError(tool, name, "%s must be one of %s, not %s", name, wordList(choices, "or"), show(v)).
			With("choices", choices)
	}
	if n, ok := v.(float64); ok {
		unit := units[name]
		if unit != "" {
			unit = " " + unit
		}
		lo, hi := p.Minimum, p.Maximum
		switch {
		case lo != nil && hi != nil && (n < *lo || n > *hi):
			return argError(tool, name, "%s must be from %g to %g%s, not %g", name, *lo, *hi, unit, n).
				With("minimum", *lo).With("maximum", *hi)
		case lo != nil && n < *lo:
			return argError(tool, name, "%s must be at least %g%s, not %g", name, *lo, unit, n).With("minimum", *lo)
		case hi != nil && n > *hi:
			return argError(tool, name, "%s must be at most %g%s, not %g", name, *hi, unit, n).With("maximum", *hi)
		}
		if slices.Contains(types, "integer") && n != math.Trunc(n) {
			return argError(tool, name, "%s must be a whole number, not %g", name, n)
		}
	}
	if sv, ok := v.(string); ok && p.Pattern != "" {
		if re, err := regexp.Compile(p.Pattern); err == nil && !re.MatchString(sv) {
			return argError(tool, name, "%s %q does not have the expected form: %s", name, sv, describe(p))
		}
	}
	if m, ok := v.(map[string]any); ok && p.AdditionalProperties != nil && p.AdditionalProperties.Type == "string" {
		for _, k := range slices.Sorted(func(yield func(string) bool) {
			for k := range m {
				if !yield(k) {
					return
				}
			}
		}) {
			if _, ok := m[k].(string); !ok {
				return argError(tool, name, "%s.%s must be a string, not %s", name, k, jsonKind(m[k]))
			}
		}
	}
	return nil
}

func argError(tool, name, format string, args ...any) *mcpbox.Error {
	return mcpbox.Errorf(mcpbox.EINVALID, format, args...).With("argument", name).With("tool", tool).
		WithSuggestion(fmt.Sprintf("call %s again with %s corrected", tool, name))
}

func hasType(v any, t string) bool {
	switch t {
	case "string":
		_, ok := v.(string)
		return ok
	case "number":
		_, ok := v.(float64)
		return ok
	case "integer":
		n, ok := v.(float64)
		return ok && n == math.Trunc(n)
	case "boolean":
		_, ok := v.(bool)
		return ok
	case "object":
		_, ok := v.(map[string]any)
		return ok
	case "array":
		_, ok := v.([]any)
		return ok
	case "null":
		return v == nil
	}
	return true
}

func jsonKind(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("the string %q", clipWord(v))
	case float64:
		return fmt.Sprintf("the number %g", v)
	case bool:
		return fmt.Sprintf("%t", v)
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("%T", v)
}

func show(v any) string {
	if s, ok := v.(string); ok {
		return fmt.Sprintf("%q", clipWord(s))
	}
	b, _ := json.Marshal(v)
	return clipWord(string(b))
}

// clipWord keeps an echoed value short: it may be anything a caller sent.
func clipWord(s string) string {
	if len(s) > 64 {
		return strings.ToValidUTF8(s[:64], "") + "…"
	}
	return s
}

func articles(types []string) []string {
	var out []string
	for _, t := range types {
		switch t {
		case "integer":
			out = append(out, "a whole number")
		case "object", "array":
			out = append(out, "an "+t)
		case "null":
			out = append(out, "null")
		default:
			out = append(out, "a "+t)
		}
	}
	return out
}

// wordList joins items as "a, b and c" (or "a, b or c").
func wordList(items []string, conj string) string {
	switch len(items) {
	case 0:
		return "nothing"
	case 1:
		return items[0]
	}
	return strings.Join(items[:len(items)-1], ", ") + " " + conj + " " + items[len(items)-1]
}

func propertyNames(s *jsonschema.Schema) []string {
	if len(s.PropertyOrder) > 0 {
		return s.PropertyOrder
	}
	return slices.Sorted(func(yield func(string) bool) {
		for k := range s.Properties {
			if !yield(k) {
				return
			}
		}
	})
}

func isFalse(s *jsonschema.Schema) bool {
	b, err := json.Marshal(s)
	return err == nil && (string(b) == "false" || string(b) == `{"not":{}}`)
}

// describe is a property's description, cut at its first sentence.
func describe(p *jsonschema.Schema) string {
	if p == nil || p.Description == "" {
		return "see the tool's input schema"
	}
	d := p.Description
	if i := strings.Index(d, ". "); i > 0 {
		d = d[:i+1]
	}
	return d
}
