package mcpserver

import (
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
)

// BenchmarkCheckArgs measures what the worded argument check adds to a
// call (execute_code's usual arguments), beside the schema validation
// every call already had.
func BenchmarkCheckArgs(b *testing.B) {
	in, err := jsonschema.For[executeCodeIn](&jsonschema.ForOptions{})
	if err != nil {
		b.Fatal(err)
	}
	executeCode().(*toolDef[executeCodeIn, executeCodeOut]).schema(in)
	resolved, err := in.Resolve(nil)
	if err != nil {
		b.Fatal(err)
	}
	args := map[string]any{"code": "x+1", "session_id": "abc123", "language": "python", "timeout": 30.0}
	b.Run("baseline=validate", func(b *testing.B) {
		for b.Loop() {
			if err := resolved.Validate(args); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("checkArgs", func(b *testing.B) {
		for b.Loop() {
			if err := checkArgs("execute_code", in, args); err != nil {
				b.Fatal(err)
			}
		}
	})
}
