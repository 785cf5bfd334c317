package mcpserver

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/mcpbox/mcpbox"
)

// ParseDuration reads a length of time given as seconds (7200, "7200",
// 90.5) or as a Go duration ("2h", "90s", "1h30m"), so a ttl means the
// same in a tool call and on the command line.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		if n <= 0 || n > float64(1<<62)/float64(time.Second) {
			return 0, mcpbox.Errorf(mcpbox.EINVALID, "%s seconds is not a length of time mcpbox can use: give a positive number", s)
		}
		return time.Duration(n * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return 0, mcpbox.Errorf(mcpbox.EINVALID, "%q is not a length of time: give seconds (7200) or a duration such as 2h, 90s or 1h30m", s)
	}
	return d, nil
}

// durationArg is an argument that is seconds (a number) or a duration
// string; zero when left out.
type durationArg struct {
	json.RawMessage
}

// duration reads the argument; tool and name are for the error.
func (a durationArg) duration(tool, name string) (time.Duration, error) {
	if len(a.RawMessage) == 0 || string(a.RawMessage) == "null" {
		return 0, nil
	}
	var v any
	if err := json.Unmarshal(a.RawMessage, &v); err != nil {
		return 0, argError(tool, name, "%s must be seconds or a duration such as \"2h\"", name)
	}
	var s string
	switch v := v.(type) {
	case float64:
		s = strconv.FormatFloat(v, 'g', -1, 64)
	case string:
		s = v
	default:
		return 0, argError(tool, name, "%s must be seconds (a number) or a duration such as \"2h\", not %s", name, jsonKind(v))
	}
	d, err := ParseDuration(s)
	if err != nil {
		return 0, argError(tool, name, "%s: %s", name, err.(*mcpbox.Error).Message)
	}
	return d, nil
}

// durationSchema describes a durationArg property: a number of seconds or
// a string.
func durationSchema(s *jsonschema.Schema, name string) {
	p := s.Properties[name]
	s.Properties[name] = &jsonschema.Schema{Types: []string{"number", "string"}, Description: p.Description}
}

// sessionCreatedText says when a new session ends, and why: both its
// deadlines, since the idle one usually comes first and a caller who
// asked for a long ttl would otherwise read it as the ttl ignored.
func sessionCreatedText(o *sessionInfo) string {
	idle := time.Duration(o.IdleTimeout * float64(time.Second))
	if o.EndsAt == "" {
		return fmt.Sprintf("session %s created (%s); it ends after %s without a call (at %s if unused)", o.SessionID, o.Flavor, idle, o.ExpiresAt)
	}
	if idle <= 0 || o.EndsAt == o.ExpiresAt {
		return fmt.Sprintf("session %s created (%s); it ends at %s (its ttl)", o.SessionID, o.Flavor, o.EndsAt)
	}
	return fmt.Sprintf("session %s created (%s); it ends at %s at the latest (its ttl), and sooner if unused: "+
		"after %s without a call (the server's idle timeout; at %s if unused), each call pushing that back", o.SessionID, o.Flavor, o.EndsAt, idle, o.ExpiresAt)
}
