package mcpbox

import (
	"errors"
	"fmt"
)

// Error codes. They are stable strings: adapters map them to HTTP status
// codes, JSON-RPC errors and MCP tool results, and clients match on them.
const (
	EINVALID     = "INVALID_ARGUMENT"
	ENOTFOUND    = "NOT_FOUND"
	ESESSION     = "SESSION_NOT_FOUND"
	ELIMIT       = "RESOURCE_LIMIT_EXCEEDED"
	ETIMEOUT     = "EXECUTION_TIMEOUT"
	ECODE        = "CODE_EXECUTION_ERROR"
	ECOMMAND     = "COMMAND_EXECUTION_ERROR"
	ECREATE      = "SANDBOX_CREATION_FAILED"
	EUNAUTH      = "UNAUTHENTICATED"
	EUNSUPPORTED = "NOT_SUPPORTED"
	EUNAVAILABLE = "UNAVAILABLE"
	// ECONFLICT is a compare-and-swap that lost: the record changed since
	// it was read. Read it again and retry, or give up.
	ECONFLICT = "CONFLICT"
	EINTERNAL = "INTERNAL"
)

// Error is a domain error: a code callers can act on, a message for people,
// and suggestions for what to do next.
type Error struct {
	Code        string
	Message     string
	Suggestions []string
	// Context carries the numbers behind the error (a limit and its value,
	// a session id) for structured replies.
	Context map[string]any
	// Err is the underlying cause, if any.
	Err error
}

// Errorf returns an Error with the given code and formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// WithSuggestion adds a recovery suggestion and returns e.
func (e *Error) WithSuggestion(s string) *Error {
	e.Suggestions = append(e.Suggestions, s)
	return e
}

// With records a context value and returns e.
func (e *Error) With(key string, value any) *Error {
	if e.Context == nil {
		e.Context = map[string]any{}
	}
	e.Context[key] = value
	return e
}

// Wrap records the underlying cause and returns e.
func (e *Error) Wrap(err error) *Error {
	e.Err = err
	return e
}

func (e *Error) Error() string {
	if e.Err != nil {
		return e.Message + ": " + e.Err.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Err }

// ErrorCode returns the code of the first *Error in err's chain, or
// EINTERNAL for anything unrecognised ("" for nil).
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return EINTERNAL
}

// ErrorSuggestions returns the suggestions of the first *Error in err's chain.
func ErrorSuggestions(err error) []string {
	var e *Error
	if errors.As(err, &e) {
		return e.Suggestions
	}
	return nil
}
