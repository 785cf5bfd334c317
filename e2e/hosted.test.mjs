// The gateway through the MCP TypeScript SDK's client: hosted servers'
// tools listed with their server's prefix, called, with progress and
// cancellation, and list_changed when a hosted server's tools change;
// their prompts and resources forwarded too.
// hosted_test.go runs this file with node --test, with MCPBOX_URL (a
// running `mcpbox serve` hosting everything, memory, fs and py),
// MCPBOX_BIN, MCPBOX_HOME and MCPBOX_CONFIG set.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport, getDefaultEnvironment } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { ToolListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const base = process.env.MCPBOX_URL;
const transports = {
  stdio: () => new StdioClientTransport({
    command: process.env.MCPBOX_BIN, args: ["mcp", "--config", process.env.MCPBOX_CONFIG],
    env: { ...getDefaultEnvironment(), MCPBOX_HOME: process.env.MCPBOX_HOME, MCPBOX_SERVERS_FILE: process.env.MCPBOX_SERVERS_FILE },
    stderr: "ignore",
  }),
  "streamable-http": () => new StreamableHTTPClientTransport(new URL(base + "/mcp")),
};

const text = (res) => res.content.filter((c) => c.type === "text").map((c) => c.text).join("");

for (const [name, make] of Object.entries(transports)) {
  test(name, async (t) => {
    const client = new Client({ name: "mcpbox-hosted-e2e", version: "1.0.0" });
    let changed = 0;
    client.setNotificationHandler(ToolListChangedNotificationSchema, () => { changed++; });
    await client.connect(make());
    t.after(() => client.close());

    await t.test("lists hosted tools with their server's prefix", async () => {
      const { tools } = await client.listTools();
      const names = tools.map((x) => x.name);
      for (const want of ["execute_code", "everything__echo", "everything__trigger-long-running-operation",
        "memory__create_entities", "memory__read_graph", "fs__list_directory", "py__add_tool"]) {
        assert.ok(names.includes(want), `${want} missing from ${names}`);
      }
      for (const n of names) assert.match(n, /^[a-zA-Z0-9_-]{1,64}$/);
      const echo = tools.find((x) => x.name === "everything__echo");
      assert.ok(echo.inputSchema.properties.message, "the hosted tool's schema comes along");
    });

    await t.test("calls a hosted tool", async () => {
      const res = await client.callTool({ name: "everything__echo", arguments: { message: "hi " + name } });
      assert.ok(!res.isError, text(res));
      assert.match(text(res), new RegExp("hi " + name));
    });

    await t.test("keeps a warm server's state", async () => {
      const entity = "e2e-" + name;
      const made = await client.callTool({ name: "memory__create_entities",
        arguments: { entities: [{ name: entity, entityType: "test", observations: ["from " + name] }] } });
      assert.ok(!made.isError, text(made));
      const graph = await client.callTool({ name: "memory__read_graph", arguments: {} });
      assert.match(text(graph), new RegExp(entity));
    });

    await t.test("passes progress through", async () => {
      const seen = [];
      const res = await client.callTool({ name: "everything__trigger-long-running-operation", arguments: { duration: 1, steps: 4 } },
        undefined, { onprogress: (p) => seen.push(p) });
      assert.ok(!res.isError, text(res));
      const mine = seen.filter((p) => p.total === 4);
      // The SDK hands a progress notification to onprogress a microtask
      // later, but settles the result at once: a last notification read in
      // the same chunk as the result is dropped by the client itself (the
      // same happens connected straight to the server). Every earlier one
      // must arrive.
      assert.ok(mine.length >= 3, `progress from the hosted server: ${JSON.stringify(seen)}`);
      assert.deepEqual(mine.slice(0, 3).map((p) => p.progress), [1, 2, 3]);
      for (let i = 1; i < seen.length; i++) assert.ok(seen[i].progress > seen[i - 1].progress, "progress increases");
    });

    await t.test("cancels a hosted call", async () => {
      const ac = new AbortController();
      const started = Date.now();
      const call = client.callTool({ name: "everything__trigger-long-running-operation", arguments: { duration: 60, steps: 60 } },
        undefined, { signal: ac.signal, onprogress: () => ac.abort("enough") });
      await assert.rejects(call);
      // The server is free again: a next call answers.
      const res = await client.callTool({ name: "everything__echo", arguments: { message: "after cancel" } });
      assert.match(text(res), /after cancel/);
      assert.ok(Date.now() - started < 50000, "the cancelled call did not run its minute");
    });

    await t.test("forwards a hosted server's prompts and resources", async () => {
      const { prompts } = await client.listPrompts();
      const args = prompts.find((p) => p.name === "everything__args-prompt");
      assert.ok(args?.arguments?.some((a) => a.name === "city" && a.required), `args-prompt in ${prompts.map((p) => p.name)}`);
      const got = await client.getPrompt({ name: "everything__args-prompt", arguments: { city: "Paris" } });
      assert.match(got.messages[0].content.text, /Paris/);
      const { resources } = await client.listResources();
      const doc = resources.find((r) => r.uri === "demo://resource/static/document/features.md");
      assert.ok(doc, `features.md in ${resources.map((r) => r.uri)}`);
      const read = await client.readResource({ uri: doc.uri });
      assert.equal(read.contents[0].uri, doc.uri);
      assert.ok(read.contents[0].text.length > 0, "the document's text");
      const { resourceTemplates } = await client.listResourceTemplates();
      assert.ok(resourceTemplates.some((x) => x.uriTemplate === "demo://resource/dynamic/text/{resourceId}"));
      const dyn = await client.readResource({ uri: "demo://resource/dynamic/text/1" });
      assert.match(dyn.contents[0].text, /Resource 1/);
    });

    await t.test("hears list_changed when a hosted server's tools change", async () => {
      const before = changed;
      const res = await client.callTool({ name: "py__add_tool", arguments: { name: "added_" + name.replace("-", "_") } });
      assert.ok(!res.isError, text(res));
      for (let i = 0; i < 200 && changed === before; i++) await new Promise((r) => setTimeout(r, 50));
      assert.ok(changed > before, "notifications/tools/list_changed arrived");
      const { tools } = await client.listTools();
      assert.ok(tools.some((x) => x.name === "py__added_" + name.replace("-", "_")), "the new tool is listed");
    });
  });
}
