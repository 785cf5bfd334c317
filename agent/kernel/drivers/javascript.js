// The JavaScript kernel driver: one per context, started by the agent as
// `node -e <this file>`. Requests arrive as JSON lines on fd 3, events
// leave as JSON lines on fd 4; console.log/console.error go through fd 4
// in order, and a marker written to fd 1 and 2 after each cell tells the
// agent it has all that was written there directly.
//
// Cells run as scripts in this realm (vm.runInThisContext), so functions,
// classes and top-level variables survive between cells. Top-level let,
// const and class become var, so a cell can run twice without "already
// declared". A cell using await runs in an async function, with its
// top-level declarations turned into globals and its last line returned.
'use strict';
const fs = require('fs');
const vm = require('vm');
const util = require('util');
const { Writable } = require('stream');
const readline = require('readline');
const net = require('net');

const send = (ev) => fs.writeSync(4, JSON.stringify(ev) + '\n');
const sink = (type) => new Writable({
  write(chunk, _enc, cb) { send({ type, text: chunk.toString() }); cb(); },
});
globalThis.console = new console.Console({ stdout: sink('stdout'), stderr: sink('stderr') });
globalThis.require = require;
// Node's -e mode puts its own `module` on the global, later than this
// script runs; cells get ours, defined again before each one.
const mod = { exports: {} };
function bindModule() {
  for (const [name, value] of [['module', mod], ['exports', mod.exports]]) {
    Object.defineProperty(globalThis, name, { value, writable: true, configurable: true, enumerable: false });
  }
}

// SIGINT interrupts a running cell and nothing else. vm's breakOnSigint
// stops synchronous code, but around each such call node swaps SIGINT's
// handler: it removes the process's SIGINT listeners (SIGINT's action is
// then the default, death), starts its watchdog, and when it stops it, a
// handler that exits until the listeners are back. A SIGINT in those gaps,
// an agent's interrupt landing as a cell starts or ends, kills the kernel.
// So, where node lets it, the driver keeps node's SIGINT watchdog started
// for good and has no SIGINT listener: the watchdog's handler is always
// in place; a SIGINT while a cell's synchronous code runs stops it, and
// any other only leaves a flag, which a cell awaiting a promise polls
// (node clears it as each synchronous part ends). Elsewhere it falls back
// to a listener. A cell that adds its own SIGINT listener brings node's
// swapping back, gaps included.
let watchdog = null;
try {
  const noDeprecation = process.noDeprecation;
  process.noDeprecation = true;
  try {
    const b = process.binding('contextify');
    if (typeof b.startSigintWatchdog === 'function' && typeof b.watchdogHasPendingSigint === 'function' && b.startSigintWatchdog()) {
      watchdog = b;
    }
  } finally {
    process.noDeprecation = noDeprecation;
  }
} catch (e) {}
const interrupted = () => new Error('Interrupted by the execution timeout');

// The watchdog's signal handler only wakes a helper thread, which then
// stops the cell registered at that moment, or else raises the flag: an
// interrupt that came as a cell ended could still reach the next cell if
// that thread ran late. So when the agent says it interrupted the
// previous cell (req.settle) and that cell did not stop for it, the next
// waits for the flag (a second, at most: node clears the flag at the end
// of a cell's synchronous part, so it may never come), then clears it.
let stopped = false; // the cell was stopped by SIGINT
function settle() {
  if (!stopped) {
    const t = new Int32Array(new SharedArrayBuffer(4));
    const deadline = process.hrtime.bigint() + 1000000000n;
    while (!watchdog.watchdogHasPendingSigint() && process.hrtime.bigint() < deadline) Atomics.wait(t, 0, 0, 0.05);
  }
  watchdog.startSigintWatchdog();
  watchdog.stopSigintWatchdog();
}

let interrupt = null; // stops the running cell's wait for its promise
if (!watchdog) process.on('SIGINT', () => { if (interrupt) interrupt(); });

// A cell's synchronous part runs inside this script, under breakOnSigint,
// so "started" goes out once the watchdog covers it: the agent interrupts
// only after "started", when the interrupt stops the cell.
const enter = Symbol.for('mcpbox.enter');
const runner = new vm.Script('globalThis[Symbol.for("mcpbox.enter")]()', { filename: '<mcpbox>' });

function rewrite(code) {
  code = code.replace(/^(let|const)(\s)/gm, 'var$2').replace(/^class\s+([A-Za-z_$][\w$]*)/gm, 'var $1 = class $1');
  if (!/\bawait\b/.test(code)) return { code, async: false };
  const lines = code.replace(/\s+$/, '').split('\n').map((l) => l.replace(/^var\s+([A-Za-z_$][\w$]*)\s*=/, 'globalThis.$1 ='));
  // Top-level functions stay declarations (hoisted, as in a script) and
  // become globals from the wrapper's first line, so `async function
  // handler` with an await inside is still found by handler mode.
  const fns = [];
  for (const l of lines) {
    const m = /^(?:async\s+)?function\s*\*?\s*([A-Za-z_$][\w$]*)/.exec(l);
    if (m) fns.push('globalThis.' + m[1] + ' = ' + m[1] + ';');
  }
  const last = lines.length ? lines[lines.length - 1].trim() : '';
  if (last && !/^(var|let|const|function|async\s+function|class|if|for|while|do|switch|try|return|throw|import|export|\}|\/\/)/.test(last) && !last.endsWith('{')) {
    lines[lines.length - 1] = 'return (' + last.replace(/;$/, '') + ');';
  }
  return { code: '(async () => {' + fns.join(' ') + '\n' + lines.join('\n') + '\n})()', async: true };
}

async function runCell(req) {
  if (globalThis.module !== mod) bindModule();
  if (watchdog && req.settle) settle();
  stopped = false;
  const before = handlers();
  const { code, async } = rewrite(req.code);
  const script = new vm.Script(code, { filename: '<cell>' });
  Object.defineProperty(globalThis, enter, {
    value: () => { send({ type: 'started' }); return script.runInThisContext(); },
    writable: true, configurable: true, enumerable: false,
  });
  let value;
  try {
    value = runner.runInThisContext({ breakOnSigint: true });
  } catch (e) {
    if (e && e.code === 'ERR_SCRIPT_EXECUTION_INTERRUPTED') stopped = true;
    throw e;
  } finally {
    delete globalThis[enter];
  }
  if (async || value instanceof Promise) {
    let poll;
    const stop = (reject) => { stopped = true; reject(interrupted()); };
    value = await new Promise((resolve, reject) => {
      interrupt = () => stop(reject);
      if (watchdog) poll = setInterval(() => { if (watchdog.watchdogHasPendingSigint()) stop(reject); }, 10);
      Promise.resolve(value).then(resolve, reject);
    }).finally(() => clearInterval(poll));
  }
  if (value !== undefined) send({ type: 'result', text: util.inspect(value), is_main_result: true });
  if ('event' in req) await callHandler(req.event, pickHandler(before), req.timeout);
}

// handlers returns the handler candidates as they stand: the exported one
// (module.exports.handler, else exports.handler) and the global one.
function handlers() {
  const exported = (mod.exports && mod.exports.handler) || (globalThis.exports && globalThis.exports.handler);
  return { exported, global: globalThis.handler };
}

// pickHandler chooses which handler an event goes to. The handler the
// call's own code defined wins: exported first, then global. When the
// code defined none, an earlier cell's exported handler wins over an
// earlier global one, as in Lambda, which only knows exports.
function pickHandler(before) {
  const now = handlers();
  const fresh = (k) => typeof now[k] === 'function' && now[k] !== before[k];
  if (fresh('exported')) return now.exported;
  if (fresh('global')) return now.global;
  return typeof now.exported === 'function' ? now.exported : now.global;
}

// callHandler calls fn Lambda-style; the context counts down from the
// cell's timeout (seconds).
async function callHandler(event, fn, timeout) {
  if (typeof fn !== 'function') throw new ReferenceError('handler mode needs a function: define handler(event, context), or set exports.handler or module.exports.handler');
  const deadline = Date.now() + (timeout || 30) * 1000;
  const id = require('crypto').randomUUID();
  const context = {
    awsRequestId: id, aws_request_id: id, functionName: 'handler', function_name: 'handler',
    getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
  };
  const value = await fn(event, context);
  let text;
  try { text = JSON.stringify(value); } catch (e) { text = undefined; }
  if (text === undefined) {
    const type = value === null ? 'null' : (value && value.constructor ? value.constructor.name : typeof value);
    throw new TypeError('handler returned a ' + type + ', which cannot be encoded as JSON');
  }
  send({ type: 'return_value', value: JSON.parse(text) });
}

async function main() {
  // A socket, not fs.createReadStream: that reads in libuv's thread pool,
  // and process.exit() waits for a thread blocked on the pipe for ever.
  const input = new net.Socket({ fd: 3, readable: true, writable: false });
  const rl = readline.createInterface({ input, crlfDelay: Infinity });
  for await (const line of rl) {
    const req = JSON.parse(line);
    // A call's env vars hold for that call only (the code interpreter's
    // env_vars); what they hid comes back after.
    const saved = Object.keys(req.env || {}).map((k) => [k, process.env[k]]);
    for (const [k, v] of Object.entries(req.env || {})) process.env[k] = v;
    try {
      await runCell(req);
    } catch (e) {
      const err = e instanceof Error ? e : new Error(String(e));
      send({ type: 'error', name: err.name, value: err.message, traceback: err.stack || String(err) });
    } finally {
      for (const [k, v] of saved) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
      interrupt = null;
      fs.writeSync(1, req.marker);
      fs.writeSync(2, req.marker);
      send({ type: 'done' });
    }
  }
}
main();
