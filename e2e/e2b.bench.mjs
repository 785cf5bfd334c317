// Timings of E2B SDK calls against mcpbox, for e2b_bench_test.go: argv[2]
// names the call, argv[3] how many to time. It prints one JSON array of
// milliseconds, one per timed call (warm-up calls are not in it).
import { Sandbox } from "e2b";
import { Sandbox as CodeInterpreter } from "@e2b/code-interpreter";

const [what, nArg] = process.argv.slice(2);
const n = Number(nArg);
const out = [];
const time = async (f) => {
  const t0 = performance.now();
  await f();
  out.push(performance.now() - t0);
};
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

if (what === "create") {
  // From a warm pool: each create claims a ready sandbox; the pool refills
  // between calls, untimed.
  for (let i = 0; i < n; i++) {
    let s;
    await time(async () => { s = await Sandbox.create(); });
    await s.kill();
    await sleep(Number(process.env.REFILL_MS ?? 1500));
  }
} else if (what === "health") {
  // isRunning() is GET /health through the data plane: what the adapter
  // and the door add to any call, with no work in the sandbox.
  const s = await Sandbox.create();
  for (let i = 0; i < 5; i++) await s.isRunning();
  for (let i = 0; i < n; i++) await time(() => s.isRunning());
  await s.kill();
} else if (what === "run") {
  const s = await Sandbox.create();
  for (let i = 0; i < 5; i++) await s.commands.run("true");
  for (let i = 0; i < n; i++) await time(() => s.commands.run("true"));
  await s.kill();
} else if (what === "code") {
  const s = await CodeInterpreter.create();
  await s.runCode("x = 1");
  for (let i = 0; i < 5; i++) await s.runCode("x+1");
  for (let i = 0; i < n; i++) {
    await time(async () => {
      const e = await s.runCode("x+1");
      if (e.text !== "2") throw new Error(`x+1 gave ${JSON.stringify(e)}`);
    });
  }
  await s.kill();
} else {
  throw new Error(`unknown call ${what}: use create, health, run or code`);
}
console.log(JSON.stringify(out));
