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

let interrupt = null; // rejects the running cell on SIGINT
process.on('SIGINT', () => { if (interrupt) interrupt(new Error('Interrupted by the execution timeout')); });

function rewrite(code) {
  code = code.replace(/^(let|const)(\s)/gm, 'var$2').replace(/^class\s+([A-Za-z_$][\w$]*)/gm, 'var $1 = class $1');
  if (!/\bawait\b/.test(code)) return { code, async: false };
  const lines = code.replace(/\s+$/, '').split('\n').map((l) => l.replace(/^var\s+([A-Za-z_$][\w$]*)\s*=/, 'globalThis.$1 ='));
  const last = lines.length ? lines[lines.length - 1].trim() : '';
  if (last && !/^(var|let|const|function|class|if|for|while|do|switch|try|return|throw|import|export|\}|\/\/)/.test(last) && !last.endsWith('{')) {
    lines[lines.length - 1] = 'return (' + last.replace(/;$/, '') + ');';
  }
  return { code: '(async () => {\n' + lines.join('\n') + '\n})()', async: true };
}

async function runCell(req) {
  if (globalThis.module !== mod) bindModule();
  const { code, async } = rewrite(req.code);
  let value = vm.runInThisContext(code, { filename: '<cell>', breakOnSigint: true });
  if (async || value instanceof Promise) {
    value = await new Promise((resolve, reject) => {
      interrupt = reject;
      Promise.resolve(value).then(resolve, reject);
    });
  }
  if (value !== undefined) send({ type: 'result', text: util.inspect(value), is_main_result: true });
  if ('event' in req) await callHandler(req.event);
}

async function callHandler(event) {
  const fn = globalThis.handler || (mod.exports && mod.exports.handler) || (globalThis.exports && globalThis.exports.handler);
  if (typeof fn !== 'function') throw new ReferenceError('handler mode needs a function handler, exports.handler or module.exports.handler');
  const deadline = Date.now() + 30000;
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
    for (const [k, v] of Object.entries(req.env || {})) process.env[k] = v;
    try {
      await runCell(req);
    } catch (e) {
      const err = e instanceof Error ? e : new Error(String(e));
      send({ type: 'error', name: err.name, value: err.message, traceback: err.stack || String(err) });
    } finally {
      interrupt = null;
      fs.writeSync(1, req.marker);
      fs.writeSync(2, req.marker);
      send({ type: 'done' });
    }
  }
}
main();
