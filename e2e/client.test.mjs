// End-to-end tests with the MCP TypeScript SDK's client over every
// transport mcpbox serves. e2e_test.go runs this file with node --test,
// with MCPBOX_URL (a running `mcpbox serve`), MCPBOX_BIN and MCPBOX_HOME set.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport, getDefaultEnvironment } from "@modelcontextprotocol/sdk/client/stdio.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const base = process.env.MCPBOX_URL;
const transports = {
  stdio: () => new StdioClientTransport({
    command: process.env.MCPBOX_BIN, args: ["mcp"],
    env: { ...getDefaultEnvironment(), MCPBOX_HOME: process.env.MCPBOX_HOME },
    stderr: "ignore",
  }),
  sse: () => new SSEClientTransport(new URL(base + "/sse")),
  "streamable-http": () => new StreamableHTTPClientTransport(new URL(base + "/mcp")),
};

const text = (res) => res.content.filter((c) => c.type === "text").map((c) => c.text).join("");

for (const [name, make] of Object.entries(transports)) {
  test(name, async (t) => {
    const client = new Client({ name: "mcpbox-e2e", version: "1.0.0" });
    await client.connect(make());
    t.after(() => client.close());

    await t.test("lists the tools", async () => {
      const { tools } = await client.listTools();
      const names = tools.map((x) => x.name);
      for (const want of ["execute_code", "execute_command", "create_session", "get_sessions", "stop_session",
        "read_file", "write_file", "list_files", "get_volume_path", "get_command_output", "stop_command"]) {
        assert.ok(names.includes(want), `${want} missing from ${names}`);
      }
      assert.ok(tools.every((x) => x.outputSchema), "every tool declares an outputSchema");
    });

    let session;
    await t.test("keeps state between calls", async () => {
      const first = await client.callTool({ name: "execute_code", arguments: { code: "x = 42" } });
      assert.equal(first.isError, undefined, text(first));
      session = first.structuredContent.session_id;
      assert.ok(session, "a session id comes back");
      const second = await client.callTool({ name: "execute_code", arguments: { code: "print(x)", session_id: session } });
      assert.equal(second.structuredContent.stdout, "42\n");
      assert.match(text(second), /42/);
    });

    await t.test("returns a plot as image content", async () => {
      const res = await client.callTool({ name: "execute_code", arguments: { session_id: session,
        code: "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\nplt.plot([3, 1, 2])\nplt.show()" } });
      assert.ok(!res.isError, text(res));
      const img = res.content.find((c) => c.type === "image");
      assert.ok(img, "image content arrives beside the structured content");
      assert.equal(img.mimeType, "image/png");
      const png = Buffer.from(img.data, "base64");
      assert.deepEqual([...png.subarray(1, 4)], [0x50, 0x4e, 0x47], "the data is a PNG");
    });

    await t.test("reports a raised exception as an error result", async () => {
      const res = await client.callTool({ name: "execute_code", arguments: { session_id: session, code: "undefined_name" } });
      assert.equal(res.isError, true);
      assert.equal(res.structuredContent.error_code, "CODE_EXECUTION_ERROR");
      assert.equal(res.structuredContent.error.name, "NameError");
      assert.ok(res.structuredContent.recovery_suggestions.length > 0);
    });

    await t.test("streams progress during a slow cell", async () => {
      const seen = [];
      const res = await client.callTool(
        { name: "execute_code", arguments: { session_id: session,
          code: "import time\nfor i in range(4):\n    print('step', i, flush=True)\n    time.sleep(0.25)" } },
        undefined,
        { onprogress: (p) => seen.push(p), resetTimeoutOnProgress: true },
      );
      assert.ok(!res.isError, text(res));
      assert.ok(seen.length >= 2, `only ${seen.length} progress notifications`);
      assert.ok(seen.some((p) => /step 0/.test(p.message)), JSON.stringify(seen));
      for (let i = 1; i < seen.length; i++) assert.ok(seen[i].progress > seen[i - 1].progress, "progress increases");
    });

    await t.test("an abort stops a loop and the session still answers", async () => {
      const ac = new AbortController();
      const started = Date.now();
      const call = client.callTool(
        { name: "execute_code", arguments: { session_id: session, code: "while True:\n    pass", timeout: 600 } },
        undefined, { signal: ac.signal },
      );
      setTimeout(() => ac.abort(), 700);
      await assert.rejects(call);
      assert.ok(Date.now() - started < 30000);
      // The interrupted cell frees the kernel; state survives.
      let res;
      for (let i = 0; i < 50; i++) {
        res = await client.callTool({ name: "execute_code", arguments: { session_id: session, code: "x + 1" } });
        if (!(res.isError && res.structuredContent.error_code === "RESOURCE_LIMIT_EXCEEDED")) break;
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.ok(!res.isError, text(res));
      assert.equal(res.structuredContent.results[0].text, "43");
    });

    await t.test("stops the session", async () => {
      const res = await client.callTool({ name: "stop_session", arguments: { session_id: session } });
      assert.ok(!res.isError, text(res));
      const after = await client.callTool({ name: "execute_code", arguments: { session_id: session, code: "1" } });
      assert.equal(after.structuredContent.error_code, "SESSION_NOT_FOUND");
    });
  });
}
