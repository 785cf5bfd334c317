package local_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mcpbox/mcpbox"
	"github.com/mcpbox/mcpbox/agentclient"
)

// TestKernelsInSandbox runs each language's kernel inside a real sandbox
// (user 1000, seccomp, no network), where they must keep state too.
func TestKernelsInSandbox(t *testing.T) {
	rt := newRuntime(t)
	_, c := newTinySandbox(t, rt)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, tc := range []struct{ lang, set, get, want string }{
		{"python", "import os\nx = os.getuid()", "x + 1", "1001"},
		{"javascript", "let y = process.getuid()", "y + 1", "1001"},
		{"shell", "cd /tmp && export Z=$(id -u)", "echo $((Z + 1)) $PWD", "1001 /tmp\n"},
	} {
		t.Run(tc.lang, func(t *testing.T) {
			var got strings.Builder
			collect := func(ev mcpbox.CodeEvent) {
				if ev.Type == "result" || ev.Type == "stdout" {
					got.WriteString(ev.Text)
				}
				if ev.Type == "error" {
					t.Errorf("error: %v", ev)
				}
			}
			if err := c.Execute(ctx, agentclient.ExecuteRequest{Code: tc.set, Language: tc.lang}, collect); err != nil {
				t.Fatal(err)
			}
			got.Reset()
			if err := c.Execute(ctx, agentclient.ExecuteRequest{Code: tc.get, Language: tc.lang}, collect); err != nil {
				t.Fatal(err)
			}
			if got.String() != tc.want {
				t.Errorf("got %q, want %q", got.String(), tc.want)
			}
		})
	}
	// The Python kernel started from the driver precompiled on the host.
	var got strings.Builder
	err := c.Execute(ctx, agentclient.ExecuteRequest{Code: "import sys\nsys.modules['mcpbox_kernel'].__file__"}, func(ev mcpbox.CodeEvent) {
		if ev.Type == "result" || ev.Type == "error" {
			got.WriteString(ev.Text + fmt.Sprint(string(ev.Value), errValue(ev)))
		}
	})
	if err != nil || !strings.HasPrefix(got.String(), "'/opt/mcpbox/mcpbox_kernel.py'") {
		t.Errorf("the Python kernel's driver: %q %v, want the module in /opt/mcpbox", got.String(), err)
	}
}
