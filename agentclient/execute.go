package agentclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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

// Event is one line of an /execute reply: its "type" says which.
type Event map[string]any

// Type returns the event's type.
func (e Event) Type() string { s, _ := e["type"].(string); return s }

// Text returns the event's text field.
func (e Event) Text() string { s, _ := e["text"].(string); return s }

// Execute runs code in a kernel and calls onEvent for each event as it
// arrives, in order, up to and including end_of_execution.
func (c *Client) Execute(ctx context.Context, req ExecuteRequest, onEvent func(Event)) error {
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
	sc.Buffer(nil, 64<<20) // a result may carry a large PNG
	for sc.Scan() {
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("agent sent a bad /execute line: %w", err)
		}
		onEvent(ev)
		if ev.Type() == "end_of_execution" {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return err
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
