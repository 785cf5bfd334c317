package mcpserver

import (
	"encoding/json"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"

	"github.com/mcpbox/mcpbox"
)

// ToolError is the structured part of a failed tool call, and the data of
// a JSON-RPC error: the same shape wherever a model or a client meets it.
type ToolError struct {
	ErrorCode string `json:"error_code"`
	// Category groups codes by who can fix them: input, session, limit,
	// execution, auth, or server.
	Category string `json:"category"`
	// Severity is "error" when the call failed, "warning" when it ran but
	// the code or command reported a failure of its own.
	Severity            string         `json:"severity"`
	Message             string         `json:"message"`
	RecoverySuggestions []string       `json:"recovery_suggestions"`
	Context             map[string]any `json:"context"`
}

var categories = map[string]string{
	mcpbox.EINVALID:     "input",
	mcpbox.ENOTFOUND:    "input",
	mcpbox.ESESSION:     "session",
	mcpbox.ELIMIT:       "limit",
	mcpbox.ETIMEOUT:     "execution",
	mcpbox.ECODE:        "execution",
	mcpbox.ECOMMAND:     "execution",
	mcpbox.ECREATE:      "server",
	mcpbox.EUNAUTH:      "auth",
	mcpbox.EUNSUPPORTED: "input",
	mcpbox.EUNAVAILABLE: "server",
	mcpbox.ECONFLICT:    "server",
	mcpbox.EINTERNAL:    "server",
}

// defaultSuggestions apply when the error itself carries none: a model
// should always be told what to try next.
var defaultSuggestions = map[string][]string{
	mcpbox.EINVALID:     {"fix the argument named in the message and call the tool again"},
	mcpbox.ENOTFOUND:    {"check the path with list_files"},
	mcpbox.ESESSION:     {"list your sessions with get_sessions, or call without session_id to start a new one"},
	mcpbox.ELIMIT:       {"stop sessions you no longer need with stop_session, or wait and retry"},
	mcpbox.ETIMEOUT:     {"raise timeout (up to 3600 seconds), or make the code do less per call; the session and its state are kept"},
	mcpbox.ECODE:        {"read the traceback, fix the code and run it again in the same session"},
	mcpbox.ECOMMAND:     {"read stderr, fix the command and run it again"},
	mcpbox.ECREATE:      {"retry; if it keeps failing, run `mcpbox doctor` on the server"},
	mcpbox.EUNAUTH:      {"send a valid API key as Authorization: Bearer <key> or X-API-Key"},
	mcpbox.EUNSUPPORTED: {"use one of the supported options named in the message"},
	mcpbox.EUNAVAILABLE: {"retry in a moment"},
	mcpbox.ECONFLICT:    {"retry: the session changed while this call was made"},
	mcpbox.EINTERNAL:    {"retry; if it keeps failing, report it with the server's log"},
}

// toolError turns any error into its structured form. Errors that are not
// an *mcpbox.Error are internal: their text may name host paths, so the
// model gets a generic message and the log gets the cause.
func toolError(err error) *ToolError {
	code := mcpbox.ErrorCode(err)
	te := &ToolError{ErrorCode: code, Category: categories[code], Severity: "error", Context: map[string]any{}}
	if te.Category == "" {
		te.Category = "server"
	}
	var e *mcpbox.Error
	if errors.As(err, &e) {
		te.Message = e.Message
		te.RecoverySuggestions = e.Suggestions
		for k, v := range e.Context {
			te.Context[k] = v
		}
	} else {
		te.Message = "internal error"
	}
	if code == mcpbox.ECODE || code == mcpbox.ECOMMAND {
		te.Severity = "warning"
	}
	if len(te.RecoverySuggestions) == 0 {
		te.RecoverySuggestions = defaultSuggestions[code]
	}
	if te.RecoverySuggestions == nil {
		te.RecoverySuggestions = []string{}
	}
	return te
}

// rpcError is a JSON-RPC error carrying the ToolError as data, for faults
// that are not tool results: unknown tools, malformed requests, crashes.
func rpcError(code int64, err error) *jsonrpc.Error {
	te := toolError(err)
	data, _ := json.Marshal(te)
	return &jsonrpc.Error{Code: code, Message: te.Message, Data: data}
}
