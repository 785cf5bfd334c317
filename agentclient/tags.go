package agentclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// Output is what a tagged process has printed and how it ended, as the
// agent keeps it: the last bytes of each stream, and how many earlier ones
// it dropped.
type Output struct {
	Tag           string    `json:"tag"`
	PID           uint32    `json:"pid"`
	Stdout        string    `json:"stdout"`
	Stderr        string    `json:"stderr"`
	StdoutDropped int64     `json:"stdout_dropped"`
	StderrDropped int64     `json:"stderr_dropped"`
	Done          bool      `json:"done"`
	ExitCode      int       `json:"exit_code"`
	Exited        bool      `json:"exited"`
	Status        string    `json:"status"`
	Started       time.Time `json:"started"`
}

// maxOutputReply bounds the JSON of one Output: two streams of the
// agent's largest ring, escaped, and the fields around them.
const maxOutputReply = 16 << 20

// Output returns what the process started with tag has printed so far.
// An unknown tag is an *HTTPError with status 404.
func (c *Client) Output(ctx context.Context, tag string) (*Output, error) {
	resp, err := c.do(ctx, http.MethodGet, "/mcpbox/v1/processes/"+url.PathEscape(tag)+"/output", nil, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out Output
	if err := json.NewDecoder(&limitedReader{r: resp.Body, n: maxOutputReply}).Decode(&out); err != nil {
		return nil, fmt.Errorf("agent sent a bad output reply: %w", err)
	}
	return &out, nil
}

// SetDeadline tells the agent when its sandbox ends if nobody ends it
// first; the zero time means never.
func (c *Client) SetDeadline(ctx context.Context, t time.Time) error {
	body := []byte(`{"deadline":null}`)
	if !t.IsZero() {
		body, _ = json.Marshal(map[string]time.Time{"deadline": t.UTC()})
	}
	resp, err := c.do(ctx, http.MethodPut, "/mcpbox/v1/deadline", bytes.NewReader(body), "application/json")
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}
