package agentclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/mcpbox/mcpbox"
)

// ExecuteRequest is a POST /execute body: code for a kernel.
type ExecuteRequest struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id,omitempty"`
	Language  string            `json:"language,omitempty"`
	EnvVars   map[string]string `json:"env_vars,omitempty"`
	// Event switches on handler mode: the code's handler(event, context)
	// is called with it and its value comes back as a return_value event.
	Event json.RawMessage `json:"event,omitempty"`
	// Timeout in seconds interrupts the cell; 0 means none.
	Timeout float64 `json:"timeout,omitempty"`
}

// line is one NDJSON line of an /execute reply, every field any event
// type carries; decode turns it into an mcpbox.CodeEvent.
type line struct {
	Type           string          `json:"type"`
	Text           string          `json:"text"`
	HTML           string          `json:"html"`
	Markdown       string          `json:"markdown"`
	LaTeX          string          `json:"latex"`
	JSON           json.RawMessage `json:"json"`
	PNG            string          `json:"png"`
	JPEG           string          `json:"jpeg"`
	SVG            string          `json:"svg"`
	IsMainResult   bool            `json:"is_main_result"`
	Name           string          `json:"name"`
	Value          json.RawMessage `json:"value"`
	Traceback      string          `json:"traceback"`
	ExecutionCount int             `json:"execution_count"`
	TimedOut       bool            `json:"timed_out"`
	Restarted      bool            `json:"restarted"`
}

func (l *line) event() mcpbox.CodeEvent {
	ev := mcpbox.CodeEvent{Type: l.Type}
	switch l.Type {
	case mcpbox.EventStdout, mcpbox.EventStderr:
		ev.Text = l.Text
	case mcpbox.EventResult:
		ev.Text = l.Text
		ev.Result = &mcpbox.CodeResult{Text: l.Text, HTML: l.HTML, Markdown: l.Markdown, LaTeX: l.LaTeX,
			JSON: l.JSON, PNG: l.PNG, JPEG: l.JPEG, SVG: l.SVG, IsMainResult: l.IsMainResult}
	case mcpbox.EventError:
		// An error's value is a string; anything else is shown as JSON.
		var v string
		if json.Unmarshal(l.Value, &v) != nil {
			v = string(l.Value)
		}
		ev.Error = &mcpbox.CodeError{Name: l.Name, Value: v, Traceback: l.Traceback}
	case mcpbox.EventReturnValue:
		ev.Value = l.Value
	case mcpbox.EventNumberOfExecutions:
		ev.ExecutionCount = l.ExecutionCount
	case mcpbox.EventEndOfExecution:
		ev.TimedOut, ev.Restarted = l.TimedOut, l.Restarted
	}
	return ev
}

// maxEventLine bounds one line of an /execute reply: a result may carry a
// large PNG, but nothing a sandbox sends is buffered without limit.
const maxEventLine = 64 << 20

// Execute runs code in a kernel and calls onEvent for each event as it
// arrives, in order, up to and including end_of_execution.
func (c *Client) Execute(ctx context.Context, req ExecuteRequest, onEvent func(mcpbox.CodeEvent)) error {
	body, err := json.Marshal(req)
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, http.MethodPost, "/execute", bytes.NewReader(body), "application/json")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, maxEventLine)
	for sc.Scan() {
		var l line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return fmt.Errorf("agent sent a bad /execute line: %w", err)
		}
		ev := l.event()
		onEvent(ev)
		if ev.Type == mcpbox.EventEndOfExecution {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read /execute reply: %w", err)
	}
	return errors.New("the /execute reply ended without end_of_execution")
}

// KernelContext is one kernel context of a sandbox.
type KernelContext struct {
	ID       string `json:"id"`
	Language string `json:"language"`
	Cwd      string `json:"cwd"`
}

// Contexts lists the sandbox's kernel contexts.
func (c *Client) Contexts(ctx context.Context) ([]KernelContext, error) {
	resp, err := c.do(ctx, http.MethodGet, "/contexts", nil, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out []KernelContext
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("agent sent a bad /contexts reply: %w", err)
	}
	return out, nil
}
