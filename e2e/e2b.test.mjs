// End-to-end tests of mcpbox's E2B-compatible API with E2B's own SDKs
// from npm (e2b, @e2b/code-interpreter), unmodified. e2b_test.go runs
// this file with node --test against a real `mcpbox serve`, with
// E2B_API_URL and E2B_SANDBOX_URL pointed at it, E2B_API_KEY one owner's
// key and E2B_OTHER_KEY another owner's.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import {
  Sandbox, CommandExitError, AuthenticationError, SandboxNotFoundError, NotFoundError,
  FileType, FilesystemEventType, TimeoutError,
} from "e2b";
import { Sandbox as CodeInterpreter } from "@e2b/code-interpreter";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const base = process.env.E2B_API_URL;
const keyA = process.env.E2B_API_KEY;
const keyB = process.env.E2B_OTHER_KEY;
const long = process.env.E2B_LONG === "1";
const made = [];
const create = async (opts = {}) => {
  const s = await Sandbox.create(opts);
  made.push(s);
  return s;
};
after(async () => {
  await Promise.all(made.map((s) => Sandbox.kill(s.sandboxId).catch(() => {})));
});

// A command silent for longer than undici's 300 s body timeout lives on
// the stream's keepalives; it starts first and is awaited last.
let silent;
if (long) {
  const s = await create({ timeoutMs: 15 * 60_000 });
  silent = s.commands.run("sleep 310; echo survived", { timeoutMs: 0 });
}

test("control plane", async (t) => {
  const sbx = await create({ metadata: { run: "e2e", role: "main" }, envs: { GREETING: "hello" }, timeoutMs: 120_000 });

  await t.test("getInfo describes the sandbox", async () => {
    const info = await sbx.getInfo();
    assert.equal(info.sandboxId, sbx.sandboxId);
    assert.equal(info.templateId, "base");
    assert.equal(info.state, "running");
    assert.deepEqual(info.metadata, { run: "e2e", role: "main" });
    assert.ok(info.envdVersion >= "0.6.4", info.envdVersion);
    const life = info.endAt - info.startedAt;
    assert.ok(life > 110_000 && life < 130_000, `timeout of 120 s, got ${life} ms`);
    assert.ok(info.cpuCount >= 1 && info.memoryMB >= 16);
    const same = await Sandbox.getInfo(sbx.sandboxId);
    assert.equal(same.sandboxId, sbx.sandboxId);
  });

  await t.test("envs given at create reach commands", async () => {
    const r = await sbx.commands.run("echo $GREETING");
    assert.equal(r.stdout, "hello\n");
  });

  await t.test("setTimeout moves the end", async () => {
    await sbx.setTimeout(600_000);
    const info = await sbx.getInfo();
    const left = info.endAt - Date.now();
    assert.ok(left > 590_000 && left < 610_000, `${left} ms left`);
  });

  await t.test("list filters by metadata, state and template, and pages", async () => {
    const other = await create({ metadata: { run: "e2e", role: "second" } });
    let page = await Sandbox.list({ query: { metadata: { run: "e2e", role: "main" } } }).nextItems();
    assert.deepEqual(page.map((x) => x.sandboxId), [sbx.sandboxId]);
    page = await Sandbox.list({ query: { metadata: { run: "e2e" }, state: ["running"] } }).nextItems();
    assert.deepEqual(page.map((x) => x.sandboxId).sort(), [sbx.sandboxId, other.sandboxId].sort());
    page = await Sandbox.list({ query: { metadata: { run: "e2e" }, state: ["paused"] } }).nextItems();
    assert.deepEqual(page, []);
    page = await Sandbox.list({ query: { metadata: { run: "e2e" }, template: "code-interpreter-v1" } }).nextItems();
    assert.deepEqual(page, []);
    const pager = Sandbox.list({ query: { metadata: { run: "e2e" } }, limit: 1 });
    const seen = [];
    while (pager.hasNext) {
      const items = await pager.nextItems();
      assert.ok(items.length <= 1);
      seen.push(...items.map((x) => x.sandboxId));
    }
    assert.deepEqual(seen.sort(), [sbx.sandboxId, other.sandboxId].sort());
    // Metadata with characters that need encoding.
    const odd = await create({ metadata: { "k&y=": "v a/l%" } });
    page = await Sandbox.list({ query: { metadata: { "k&y=": "v a/l%" } } }).nextItems();
    assert.deepEqual(page.map((x) => x.sandboxId), [odd.sandboxId]);
    assert.equal(await other.kill(), true);
    assert.equal(await odd.kill(), true);
  });

  await t.test("connect by id reaches the same sandbox", async () => {
    await sbx.files.write("/tmp/marker", "one");
    const again = await Sandbox.connect(sbx.sandboxId);
    assert.equal(await again.files.read("/tmp/marker"), "one");
    const before = (await sbx.getInfo()).endAt;
    await sbx.connect(); // no timeout: the end must not move earlier
    assert.ok((await sbx.getInfo()).endAt >= before);
  });

  await t.test("kill ends it; a second kill and a missing sandbox are false", async () => {
    const s = await create();
    assert.equal(await s.isRunning(), true);
    assert.equal(await s.kill(), true);
    assert.equal(await s.isRunning(), false, "502 from the data plane");
    assert.equal(await s.kill(), false);
    assert.equal(await Sandbox.kill("nosuchsandbox0000000"), false);
    await assert.rejects(Sandbox.getInfo(s.sandboxId), SandboxNotFoundError);
    await assert.rejects(Sandbox.connect(s.sandboxId), SandboxNotFoundError);
    await assert.rejects(s.commands.run("true"), (e) => e instanceof SandboxNotFoundError || e instanceof TimeoutError);
  });

  await t.test("errors: bad key, unknown template", async () => {
    await assert.rejects(Sandbox.create({ apiKey: "e2b_" + "0".repeat(40) }), AuthenticationError);
    await assert.rejects(Sandbox.list({ apiKey: "e2b_1234" }).nextItems(), AuthenticationError);
    await assert.rejects(Sandbox.create("no-such-template"), (e) => {
      assert.match(e.message, /404.*no-such-template/);
      return true;
    });
  });
});

test("commands", async (t) => {
  const sbx = await create();

  await t.test("foreground, exit codes and CommandExitError", async () => {
    const r = await sbx.commands.run("echo out; echo err >&2");
    assert.deepEqual([r.exitCode, r.stdout, r.stderr], [0, "out\n", "err\n"]);
    await assert.rejects(sbx.commands.run("echo bad >&2; exit 3"), (e) => {
      assert.ok(e instanceof CommandExitError);
      assert.equal(e.exitCode, 3);
      assert.equal(e.stderr, "bad\n");
      assert.match(e.error, /exit status 3/);
      return true;
    });
  });

  await t.test("the default user and root", async () => {
    const r = await sbx.commands.run("whoami; echo $HOME; pwd");
    assert.equal(r.stdout, "user\n/home/user\n/home/user\n", "as on E2B, commands start at home");
    const root = await sbx.commands.run("whoami; id -u", { user: "root" });
    assert.equal(root.stdout, "root\n0\n");
  });

  await t.test("cwd and envs", async () => {
    const r = await sbx.commands.run("pwd; echo $FOO", { cwd: "/tmp", envs: { FOO: "bar" } });
    assert.equal(r.stdout, "/tmp\nbar\n");
  });

  await t.test("stdin: closed unless asked for, then fed and closed", async () => {
    const r = await sbx.commands.run("cat; echo done", { timeoutMs: 10_000 });
    assert.equal(r.stdout, "done\n", "cat reads /dev/null and ends");
    const h = await sbx.commands.run("cat", { background: true, stdin: true });
    await sbx.commands.sendStdin(h.pid, "fed\n");
    await sbx.commands.closeStdin(h.pid);
    const res = await h.wait();
    assert.equal(res.stdout, "fed\n");
  });

  await t.test("onStdout streams as the command runs", async () => {
    const chunks = [];
    const times = [];
    await sbx.commands.run("echo one; sleep 1; echo two", {
      onStdout: (d) => { chunks.push(d); times.push(Date.now()); },
    });
    assert.equal(chunks.join(""), "one\ntwo\n");
    assert.ok(chunks.length >= 2 && times.at(-1) - times[0] >= 800, "the first line came before the sleep ended");
  });

  await t.test("background, list, connect, kill", async () => {
    const h = await sbx.commands.run("sleep 30", { background: true });
    assert.ok(h.pid > 0);
    // The pid is the sandbox's own.
    const check = await sbx.commands.run(`kill -0 ${h.pid} && echo alive`);
    assert.equal(check.stdout, "alive\n");
    const list = await sbx.commands.list();
    const mine = list.find((p) => p.pid === h.pid);
    assert.ok(mine, JSON.stringify(list));
    assert.equal(mine.cmd, "/bin/bash");
    const attached = await sbx.commands.connect(h.pid);
    assert.equal(await sbx.commands.kill(h.pid), true);
    await assert.rejects(attached.wait(), (e) => e instanceof CommandExitError && e.exitCode !== 0);
    assert.equal(await sbx.commands.kill(h.pid), false, "a process that is gone");
  });

  await t.test("a background command outlives the stream that started it", async () => {
    const h = await sbx.commands.run("sleep 2; echo later > /tmp/later", { background: true });
    await h.disconnect();
    const again = await sbx.commands.connect(h.pid);
    await again.wait();
    assert.equal(await sbx.files.read("/tmp/later"), "later\n");
  });

  await t.test("timeoutMs kills the command", async () => {
    const t0 = Date.now();
    await assert.rejects(sbx.commands.run("sleep 30", { timeoutMs: 1500 }));
    assert.ok(Date.now() - t0 < 15_000);
    const left = await sbx.commands.run("pgrep -x sleep || true");
    assert.equal(left.stdout, "", "the timed-out sleep is gone");
  });
});

test("files", async (t) => {
  const sbx = await create();

  await t.test("text and binary, read formats", async () => {
    const info = await sbx.files.write("/home/user/a.txt", "héllo");
    assert.equal(info.path, "/home/user/a.txt");
    assert.equal(info.name, "a.txt");
    assert.equal(await sbx.files.read("/home/user/a.txt"), "héllo");
    const bin = new Uint8Array(256).map((_, i) => i);
    await sbx.files.write("/tmp/bin", bin.buffer);
    assert.deepEqual([...(await sbx.files.read("/tmp/bin", { format: "bytes" }))], [...bin]);
    const blob = await sbx.files.read("/tmp/bin", { format: "blob" });
    assert.equal(blob.size, 256);
    const stream = await sbx.files.read("/tmp/bin", { format: "stream" });
    let n = 0;
    for await (const c of stream) n += c.length;
    assert.equal(n, 256);
    await sbx.files.write("/tmp/empty", "");
    assert.equal(await sbx.files.read("/tmp/empty"), "");
    await assert.rejects(sbx.files.read("/tmp/nope"), NotFoundError);
    const r = await sbx.commands.run("stat -c %U /home/user/a.txt");
    assert.equal(r.stdout, "user\n");
  });

  await t.test("root owns what it writes as root", async () => {
    await sbx.files.write("/tmp/rootfile", "r", { user: "root" });
    assert.equal(await sbx.files.makeDir("/tmp/rootdir", { user: "root" }), true);
    const r = await sbx.commands.run("stat -c %U /tmp/rootfile /tmp/rootdir");
    assert.equal(r.stdout, "root\nroot\n");
    const mine = await sbx.commands.run("touch /tmp/rootdir/x", { timeoutMs: 5000 }).catch((e) => e);
    assert.ok(mine instanceof CommandExitError, "the default user cannot write into root's directory");
  });

  await t.test("several files in one write", async () => {
    const res = await sbx.files.write([
      { path: "/tmp/multi/one.txt", data: "1" },
      { path: "/tmp/multi/two.txt", data: "2" },
    ]);
    assert.deepEqual(res.map((x) => x.path).sort(), ["/tmp/multi/one.txt", "/tmp/multi/two.txt"]);
    assert.equal(await sbx.files.read("/tmp/multi/two.txt"), "2");
  });

  await t.test("list, exists, getInfo, makeDir, rename, remove", async () => {
    assert.equal(await sbx.files.makeDir("/tmp/d/e"), true);
    assert.equal(await sbx.files.makeDir("/tmp/d/e"), false);
    await sbx.files.write("/tmp/d/f.txt", "x");
    const entries = await sbx.files.list("/tmp/d");
    assert.deepEqual(entries.map((e) => [e.name, e.type]).sort(), [["e", FileType.DIR], ["f.txt", FileType.FILE]]);
    assert.equal(await sbx.files.exists("/tmp/d/f.txt"), true);
    assert.equal(await sbx.files.exists("/tmp/d/nope"), false);
    const fi = await sbx.files.getInfo("/tmp/d/f.txt");
    assert.equal(fi.size, 1);
    assert.equal(fi.type, FileType.FILE);
    await assert.rejects(sbx.files.getInfo("/tmp/d/nope"), NotFoundError);
    const moved = await sbx.files.rename("/tmp/d/f.txt", "/tmp/d/g.txt");
    assert.equal(moved.path, "/tmp/d/g.txt");
    await sbx.files.remove("/tmp/d");
    assert.equal(await sbx.files.exists("/tmp/d"), false);
  });

  await t.test("file metadata round-trips", async () => {
    const w = await sbx.files.write("/tmp/meta.txt", "m", { metadata: { author: "e2e", step: "1" } });
    assert.deepEqual(w.metadata, { author: "e2e", step: "1" });
    assert.deepEqual((await sbx.files.getInfo("/tmp/meta.txt")).metadata, { author: "e2e", step: "1" });
    const listed = (await sbx.files.list("/tmp")).find((e) => e.name === "meta.txt");
    assert.deepEqual(listed.metadata, { author: "e2e", step: "1" });
  });

  await t.test("watchDir sees a new file, with its entry when asked", async () => {
    await sbx.files.makeDir("/tmp/w");
    const events = [];
    const w = await sbx.files.watchDir("/tmp/w", (e) => events.push(e), { includeEntry: true });
    await sbx.files.write("/tmp/w/new.txt", "x");
    for (let i = 0; i < 50 && !events.some((e) => e.name === "new.txt"); i++) await new Promise((r) => setTimeout(r, 100));
    await w.stop();
    assert.ok(events.some((e) => e.name === "new.txt" && (e.type === FilesystemEventType.CREATE || e.type === FilesystemEventType.WRITE)),
      JSON.stringify(events));
    assert.ok(events.some((e) => e.entry?.path === "/tmp/w/new.txt" && e.entry.type === FileType.FILE), JSON.stringify(events));
  });
});

test("code interpreter", async (t) => {
  const sbx = await CodeInterpreter.create({ envs: { SANDBOX_VAR: "from-create" } });
  made.push(sbx);

  await t.test("state lives between runCode calls", async () => {
    await sbx.runCode("x = 41");
    const e = await sbx.runCode("x + 1");
    assert.equal(e.text, "42");
    assert.equal(e.error, undefined);
  });

  await t.test("onStdout and logs", async () => {
    const out = [];
    const e = await sbx.runCode("import sys\nprint('a')\nprint('b', file=sys.stderr)", { onStdout: (m) => out.push(m.line) });
    assert.equal(e.logs.stdout.join(""), "a\n");
    assert.equal(e.logs.stderr.join(""), "b\n");
    assert.equal(out.join(""), "a\n");
  });

  await t.test("errors", async () => {
    const e = await sbx.runCode("1/0");
    assert.equal(e.error.name, "ZeroDivisionError");
    assert.match(e.error.traceback, /ZeroDivisionError/);
  });

  await t.test("a plot is a PNG", async () => {
    const e = await sbx.runCode("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()");
    const png = e.results.find((r) => r.png);
    assert.ok(png, JSON.stringify(e.results.map((r) => Object.keys(r))));
    assert.deepEqual([...Buffer.from(png.png, "base64").subarray(1, 4)], [0x50, 0x4e, 0x47]);
  });

  await t.test("env vars: per call and the sandbox's", async () => {
    const e = await sbx.runCode("import os\nprint(os.environ.get('CALL_VAR'), os.environ.get('SANDBOX_VAR'))", { envs: { CALL_VAR: "per-call" } });
    assert.equal(e.logs.stdout.join(""), "per-call from-create\n");
    const after = await sbx.runCode("import os\nprint(os.environ.get('CALL_VAR'))");
    assert.equal(after.logs.stdout.join(""), "None\n", "per-call env vars apply to that call only");
  });

  await t.test("JavaScript contexts keep their own state", async () => {
    const ctx = await sbx.createCodeContext({ language: "js" });
    assert.equal(ctx.language, "javascript");
    await sbx.runCode("let y = 20", { context: ctx });
    const e = await sbx.runCode("y + 1", { context: ctx });
    assert.equal(e.text, "21");
    const js = await sbx.runCode("console.log('js')", { language: "javascript" });
    assert.equal(js.logs.stdout.join(""), "js\n");
    const list = await sbx.listCodeContexts();
    assert.ok(list.some((c) => c.id === ctx.id), JSON.stringify(list));
    await sbx.removeCodeContext(ctx);
    assert.ok(!(await sbx.listCodeContexts()).some((c) => c.id === ctx.id));
  });

  await t.test("two SDK clients on one sandbox", async () => {
    const other = await CodeInterpreter.connect(sbx.sandboxId);
    await other.runCode("shared = 'both'");
    assert.equal((await sbx.runCode("shared")).text, "'both'");
    const [a, b] = await Promise.all([sbx.commands.run("echo a"), other.commands.run("echo b")]);
    assert.deepEqual([a.stdout, b.stdout], ["a\n", "b\n"]);
  });
});

test("pause and resume", async (t) => {
  const sbx = await create({ timeoutMs: 120_000 });
  await sbx.commands.run("nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count; sleep 0.1; done' >/dev/null 2>&1 &");
  await sbx.files.write("/tmp/state", "kept");
  const before = await sbx.getInfo();

  assert.equal(await sbx.pause(), true);
  assert.equal(await sbx.pause(), false, "already paused");
  assert.equal((await sbx.getInfo()).state, "paused");
  assert.equal(await sbx.isRunning(), false);
  const paused = (await Sandbox.list({ query: { state: ["paused"] } }).nextItems()).map((x) => x.sandboxId);
  assert.ok(paused.includes(sbx.sandboxId));
  await new Promise((r) => setTimeout(r, 2000));

  const resumed = await Sandbox.connect(sbx.sandboxId);
  const info = await resumed.getInfo();
  assert.equal(info.state, "running");
  assert.ok(info.endAt - before.endAt >= 1900, `paused time is not counted: end moved ${info.endAt - before.endAt} ms`);
  assert.equal(await resumed.files.read("/tmp/state"), "kept");
  const c1 = Number(await resumed.files.read("/tmp/count"));
  await new Promise((r) => setTimeout(r, 500));
  const c2 = Number(await resumed.files.read("/tmp/count"));
  assert.ok(c2 > c1, "the loop runs again after resume");
});

test("autoPause pauses at the timeout, and connect resumes", async () => {
  const sbx = await create({ timeoutMs: 2000, lifecycle: { onTimeout: "pause" } });
  assert.equal((await sbx.getInfo()).lifecycle.onTimeout, "pause");
  await sbx.files.write("/tmp/kept", "yes");
  let state;
  for (let i = 0; i < 60 && state !== "paused"; i++) {
    await new Promise((r) => setTimeout(r, 500));
    state = (await sbx.getInfo()).state;
  }
  assert.equal(state, "paused", "paused at its timeout, not killed");
  const back = await Sandbox.connect(sbx.sandboxId);
  assert.equal(await back.files.read("/tmp/kept"), "yes");
  const info = await back.getInfo();
  assert.equal(info.state, "running");
  assert.ok(info.endAt - Date.now() > 200_000, "resumed with the default timeout, not none");
});

test("owners are isolated", async (t) => {
  const mine = await create({ metadata: { owner: "a" } });
  const opts = { apiKey: keyB };

  await t.test("another key cannot see, list, connect to or kill it", async () => {
    await assert.rejects(Sandbox.getInfo(mine.sandboxId, opts), SandboxNotFoundError);
    await assert.rejects(Sandbox.connect(mine.sandboxId, opts), SandboxNotFoundError);
    assert.equal(await Sandbox.kill(mine.sandboxId, opts), false);
    const list = await Sandbox.list(opts).nextItems();
    assert.ok(!list.some((x) => x.sandboxId === mine.sandboxId));
    assert.equal(await mine.isRunning(), true);
  });

  await t.test("the data plane needs this sandbox's own token", async () => {
    const theirs = await Sandbox.create(opts);
    try {
      const call = (id, token) => fetch(`${base}/health`, {
        headers: { "E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983", ...(token ? { "X-Access-Token": token } : {}) },
      });
      assert.equal((await call(mine.sandboxId, mine.envdAccessToken)).status, 204);
      assert.equal((await call(mine.sandboxId)).status, 401, "no token");
      assert.equal((await call(mine.sandboxId, theirs.envdAccessToken)).status, 401, "B's token on A's sandbox");
      assert.equal((await call(theirs.sandboxId, mine.envdAccessToken)).status, 401, "A's token on B's sandbox");
      const body = JSON.stringify({ path: "/tmp" });
      const rpc = await fetch(`${base}/filesystem.Filesystem/ListDir`, {
        method: "POST", body,
        headers: { "Content-Type": "application/json", "Connect-Protocol-Version": "1", "E2b-Sandbox-Id": theirs.sandboxId, "X-Access-Token": mine.envdAccessToken },
      });
      assert.equal(rpc.status, 401);
    } finally {
      await theirs.kill();
    }
  });
});

test("the same sessions as MCP", async (t) => {
  const mcp = new Client({ name: "e2b-e2e", version: "1.0.0" });
  await mcp.connect(new StreamableHTTPClientTransport(new URL(base + "/mcp"), { requestInit: { headers: { Authorization: `Bearer ${keyA}` } } }));
  t.after(() => mcp.close());

  await t.test("a sandbox made through E2B is in get_sessions", async () => {
    const sbx = await create({ metadata: { via: "e2b" } });
    const res = await mcp.callTool({ name: "get_sessions", arguments: {} });
    assert.ok(JSON.stringify(res.structuredContent).includes(sbx.sandboxId), JSON.stringify(res.structuredContent));
  });

  await t.test("an MCP session is usable with Sandbox.connect", async () => {
    const res = await mcp.callTool({ name: "execute_code", arguments: { code: "open('/workspace/from-mcp.txt', 'w').write('mcp')" } });
    assert.ok(!res.isError, JSON.stringify(res));
    const id = res.structuredContent.session_id;
    const sbx = await Sandbox.connect(id);
    made.push(sbx);
    assert.equal(await sbx.files.read("/workspace/from-mcp.txt"), "mcp");
    const r = await sbx.commands.run("cat /workspace/from-mcp.txt");
    assert.equal(r.stdout, "mcp");
  });
});

test("a command silent for five minutes survives", { skip: !long && "set E2B_LONG=1 (e2b_test.go does)" }, async () => {
  const r = await silent;
  assert.equal(r.stdout, "survived\n");
});
