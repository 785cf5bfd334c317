package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbox/mcpbox/internal/testutil"
)

// Benchmarks of execute_code through real transports against a real
// mcpbox binary, beside mcp-server-code-runner (an unsandboxed MCP code
// runner from npm) as the peer figure. BENCHMARKS.md has the results.

func connectHTTP(b *testing.B, s *server) *mcp.ClientSession {
	b.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).
		Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: s.url + "/mcp", DisableStandaloneSSE: true}, nil)
	if err != nil {
		b.Fatal(err)
	}
	return cs
}

func connectCommand(b *testing.B, cmd *exec.Cmd) *mcp.ClientSession {
	b.Helper()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).
		Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		b.Fatal(err)
	}
	return cs
}

// warmSession creates a session with a live Python kernel.
func warmSession(b *testing.B, cs *mcp.ClientSession) string {
	b.Helper()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"code": "x = 1"}})
	if err != nil || res.IsError {
		b.Fatalf("warm up: %v %v", err, res)
	}
	var out struct {
		SessionID string `json:"session_id"`
	}
	raw, _ := json.Marshal(res.StructuredContent)
	json.Unmarshal(raw, &out)
	return out.SessionID
}

func timeCalls(b *testing.B, cs *mcp.ClientSession, params *mcp.CallToolParams) {
	b.Helper()
	var tm testutil.Timings
	for b.Loop() {
		tm.Time(func() {
			res, err := cs.CallTool(context.Background(), params)
			if err != nil || res.IsError {
				b.Fatalf("%v %v", err, res)
			}
		})
	}
	tm.Report(b)
}

func BenchmarkExecuteCode(b *testing.B) {
	testutil.RequireRoot(b)
	bin := build(b)
	s := serve(b, bin)

	b.Run("streamable-http", func(b *testing.B) {
		cs := connectHTTP(b, s)
		defer cs.Close()
		id := warmSession(b, cs)
		timeCalls(b, cs, &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"code": "x+1", "session_id": id}})
	})
	b.Run("stdio", func(b *testing.B) {
		cmd := exec.Command(bin, "mcp")
		cmd.Env = append(os.Environ(), "MCPBOX_HOME="+s.home)
		cs := connectCommand(b, cmd)
		defer cs.Close()
		id := warmSession(b, cs)
		timeCalls(b, cs, &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"code": "x+1", "session_id": id}})
	})
	b.Run("peer=mcp-server-code-runner", func(b *testing.B) {
		// It logs to stdout beside its MCP messages, which a
		// strict client refuses; grep keeps only the JSON lines.
		cmd := exec.Command("sh", "-c", `"$0" node_modules/mcp-server-code-runner/dist/cli.js | grep --line-buffered "^{"`, node(b))
		cs := connectCommand(b, cmd)
		defer cs.Close()
		timeCalls(b, cs, &mcp.CallToolParams{Name: "run-code", Arguments: map[string]any{"code": "print(1+1)", "languageId": "python"}})
	})
}

// BenchmarkConcurrentClients runs 32 clients, each on its own MCP
// connection and session, calling execute_code "x+1" as fast as they can,
// all on this machine's two cores beside the server.
//
// client=go-sdk drives the calls with go-sdk's client. client=replay
// replays the exact request go-sdk's client sent (body and headers, with a
// fresh id) over plain net/http and checks each answer: the server does the
// same work per call and the load generator less, as with wrk or hey in
// front of a web server.
func BenchmarkConcurrentClients(b *testing.B) {
	testutil.RequireRoot(b)
	bin := build(b)
	// Every client is the local owner; let it hold them all.
	b.Setenv("MCPBOX_MAX_SESSIONS_PER_OWNER", "64")
	s := serve(b, bin)
	const clients = 32
	type client struct {
		cs  *mcp.ClientSession
		id  string
		rec *recorder
		rp  *replay
	}
	cl := make([]client, clients)
	for i := range cl {
		cl[i].rec = &recorder{}
		var err error
		cl[i].cs, err = mcp.NewClient(&mcp.Implementation{Name: "bench", Version: "1"}, nil).Connect(context.Background(),
			&mcp.StreamableClientTransport{Endpoint: s.url + "/mcp", DisableStandaloneSSE: true, HTTPClient: &http.Client{Transport: cl[i].rec}}, nil)
		if err != nil {
			b.Fatal(err)
		}
		defer cl[i].cs.Close()
		cl[i].id = warmSession(b, cl[i].cs)
		cl[i].rp = cl[i].rec.capture(b, cl[i].cs, cl[i].id)
		cl[i].rec.off.Store(true)
	}
	run := func(b *testing.B, call func(c *client) error) {
		var errs atomic.Int64
		var first atomic.Value
		b.ResetTimer()
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		for i := range cl {
			wg.Go(func() {
				for next.Add(1) <= int64(b.N) {
					if err := call(&cl[i]); err != nil {
						errs.Add(1)
						first.CompareAndSwap(nil, err)
					}
				}
			})
		}
		wg.Wait()
		el := time.Since(start)
		b.ReportMetric(float64(b.N)/el.Seconds(), "calls/s")
		b.ReportMetric(float64(errs.Load()), "errors")
		if errs.Load() > 0 {
			b.Errorf("%d of %d calls failed; the first: %v", errs.Load(), b.N, first.Load())
		}
	}
	b.Run("client=go-sdk", func(b *testing.B) {
		// The load generator gets the collector setting mcpbox gives itself
		// (see tuneGC): go-sdk's client allocates as its server does.
		defer debug.SetGCPercent(debug.SetGCPercent(400))
		run(b, func(c *client) error {
			res, err := c.cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"code": "x+1", "session_id": c.id}})
			if err == nil && res.IsError {
				err = fmt.Errorf("isError: %v", res.Content)
			}
			return err
		})
	})
	b.Run("client=replay", func(b *testing.B) {
		hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
		var n atomic.Int64
		run(b, func(c *client) error { return c.rp.call(hc, s.url+"/mcp", n.Add(1)) })
	})
}

// recorder is an http.RoundTripper that keeps the last request it sent,
// until it is turned off.
type recorder struct {
	off  atomic.Bool
	mu   sync.Mutex
	hdr  http.Header
	body []byte
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil && !r.off.Load() {
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(body))
		r.mu.Lock()
		r.hdr, r.body = req.Header.Clone(), body
		r.mu.Unlock()
	}
	return http.DefaultTransport.RoundTrip(req)
}

// replay is one captured tools/call request.
type replay struct {
	hdr  http.Header
	body map[string]any
}

// capture makes one execute_code "x+1" call through cs and returns the
// request go-sdk's client sent for it.
func (r *recorder) capture(b *testing.B, cs *mcp.ClientSession, id string) *replay {
	b.Helper()
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "execute_code", Arguments: map[string]any{"code": "x+1", "session_id": id}}); err != nil {
		b.Fatal(err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	rp := &replay{hdr: r.hdr}
	if err := json.Unmarshal(r.body, &rp.body); err != nil || rp.body["method"] != "tools/call" {
		b.Fatalf("captured %s, not a tools/call: %v", r.body, err)
	}
	return rp
}

// call sends the request with JSON-RPC id n and checks that the answer is
// execute_code's result 2.
func (rp *replay) call(hc *http.Client, url string, n int64) error {
	rp.body["id"] = n
	body, _ := json.Marshal(rp.body)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	req.Header = rp.hdr.Clone()
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", resp.Status, out)
	}
	// The answer is one JSON-RPC response, plain or as an SSE event.
	data := out
	if i := bytes.Index(out, []byte("data: ")); i >= 0 {
		data = out[i+len("data: "):]
		if j := bytes.IndexByte(data, '\n'); j >= 0 {
			data = data[:j]
		}
	}
	var msg struct {
		ID     int64 `json:"id"`
		Result struct {
			IsError           bool `json:"isError"`
			StructuredContent struct {
				Results []struct {
					Text string `json:"text"`
				} `json:"results"`
			} `json:"structuredContent"`
		} `json:"result"`
	}
	if err := json.Unmarshal(data, &msg); err != nil {
		return fmt.Errorf("%v in %s", err, out)
	}
	r := msg.Result.StructuredContent.Results
	if msg.ID != n || msg.Result.IsError || len(r) != 1 || r[0].Text != "2" {
		return fmt.Errorf("unexpected answer to call %d: %s", n, out)
	}
	return nil
}
