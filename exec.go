package mcpbox

import (
	"encoding/json"
	"time"
)

// Code event types: the "type" of each line a kernel's execution replies
// with. end_of_execution is always last.
const (
	EventStdout             = "stdout"
	EventStderr             = "stderr"
	EventResult             = "result"
	EventError              = "error"
	EventReturnValue        = "return_value"
	EventNumberOfExecutions = "number_of_executions"
	EventEndOfExecution     = "end_of_execution"
)

// CodeEvent is one event of a code execution, as the sandbox's kernel sent
// it. Which fields are set depends on Type.
type CodeEvent struct {
	Type string `json:"type"`
	// Text is the output of a stdout or stderr event, and the plain-text
	// form of a result.
	Text string `json:"text,omitempty"`
	// Result holds a result event's representations.
	Result *CodeResult `json:"-"`
	// Error describes an error event.
	Error *CodeError `json:"-"`
	// Value is a return_value event's value (any JSON).
	Value json.RawMessage `json:"value,omitempty"`
	// ExecutionCount is a number_of_executions event's count.
	ExecutionCount int `json:"execution_count,omitempty"`
	// TimedOut, on end_of_execution, says the agent interrupted the cell
	// because it ran past its timeout.
	TimedOut bool `json:"timed_out,omitempty"`
	// Restarted, on end_of_execution, says the kernel had to be killed and
	// started afresh: its state is lost.
	Restarted bool `json:"restarted,omitempty"`
}

// CodeResult is a rich result: the same value in several formats. Images
// are base64 (PNG, JPEG) or text (SVG), as the kernel sent them.
type CodeResult struct {
	Text         string          `json:"text,omitempty"`
	HTML         string          `json:"html,omitempty"`
	Markdown     string          `json:"markdown,omitempty"`
	LaTeX        string          `json:"latex,omitempty"`
	JSON         json.RawMessage `json:"json,omitempty"`
	PNG          string          `json:"png,omitempty"`
	JPEG         string          `json:"jpeg,omitempty"`
	SVG          string          `json:"svg,omitempty"`
	IsMainResult bool            `json:"is_main_result,omitempty"`
}

// CodeError is an error the code raised (or the kernel reported).
type CodeError struct {
	Name      string `json:"name"`
	Value     string `json:"value"`
	Traceback string `json:"traceback,omitempty"`
}

// FileType is the kind of a file in a sandbox.
type FileType string

// File types.
const (
	FileRegular   FileType = "file"
	FileDirectory FileType = "dir"
	FileSymlink   FileType = "symlink"
	FileOther     FileType = "other"
)

// FileInfo describes one file in a sandbox.
type FileInfo struct {
	Name string   `json:"name"`
	Path string   `json:"path"`
	Type FileType `json:"type"`
	Size int64    `json:"size"`
	Mode uint32   `json:"mode"`
	// Permissions is the mode as ls shows it ("-rw-r--r--").
	Permissions string    `json:"permissions"`
	ModTime     time.Time `json:"mod_time"`
	// SymlinkTarget is where a symlink points.
	SymlinkTarget string `json:"symlink_target,omitempty"`
}
