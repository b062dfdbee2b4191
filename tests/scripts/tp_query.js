#!/usr/bin/env node
// Load a trace into Perfetto's own trace processor (the WebAssembly build the Perfetto UI
// runs, installed by scripts/setup.sh) and print the results of SQL queries as JSON.
//
// Usage: node tp_query.js TRACE_FILE SQL [SQL...]
//
// Prints one JSON array on stdout, one element per query: {"columns": [...], "rows":
// [[...], ...]}. Integers are printed exactly (the trace processor's int64s, as JSON numbers
// even past 2^53); NULL is null. A trace the importer rejects or a query that fails exits
// 1 with the trace processor's error on stderr.
//
// The engine directory (trace_processor.wasm and engine_bundle.node.js, the UI's worker
// script) is $USDT_TRACE_TP_DIR, else the one setup.sh fills:
// ${USDT_TRACE_TOOLS:-$HOME/.local/share/usdt-trace-tools}/perfetto-trace-processor.
//
// How it drives the engine: engine_bundle.node.js is the UI's web worker. It builds a
// WasmBridge (src/engine/wasm_bridge.ts in Perfetto) around the Emscripten module and waits
// for a MessagePort; bytes posted to the port are TraceProcessorRpc requests
// (protos/perfetto/trace_processor/trace_processor.proto), and it posts the responses back.
// We give it a worker-like global scope and a port of our own whose postMessage is a plain
// function: the bridge calls the wasm synchronously and the wasm replies during that call, so
// every request's responses are in hand when the call returns (no event-loop timing).
'use strict';

const fs = require('fs');
const os = require('os');
const path = require('path');
const vm = require('vm');

function die(msg) {
  process.stderr.write(`tp_query.js: ${msg}\n`);
  process.exit(1);
}

function engineDir() {
  if (process.env.USDT_TRACE_TP_DIR) return process.env.USDT_TRACE_TP_DIR;
  const tools =
    process.env.USDT_TRACE_TOOLS || path.join(os.homedir(), '.local/share/usdt-trace-tools');
  return path.join(tools, 'perfetto-trace-processor');
}

// --- Protobuf, just what TraceProcessorRpc needs.

// Encodes into byte chunks joined once: a request can carry a whole trace.
class Writer {
  constructor() {
    this.parts = [];
  }
  varint(v) {
    const b = [];
    v = BigInt(v);
    while (v >= 0x80n) {
      b.push(Number(v & 0x7fn) | 0x80);
      v >>= 7n;
    }
    b.push(Number(v));
    this.parts.push(Uint8Array.from(b));
    return this;
  }
  uint(num, v) {
    return this.varint(num << 3).varint(v);
  }
  bytes(num, b) {
    this.varint((num << 3) | 2).varint(b.length);
    this.parts.push(b);
    return this;
  }
  finish() {
    return Buffer.concat(this.parts);
  }
}

class Reader {
  constructor(buf, pos = 0, end = buf.length) {
    this.buf = buf;
    this.pos = pos;
    this.end = end;
  }
  more() {
    return this.pos < this.end;
  }
  // As a BigInt: int64 cells can exceed 2^53.
  varint() {
    let v = 0n;
    let shift = 0n;
    for (;;) {
      if (this.pos >= this.end) throw new Error('truncated varint');
      const b = this.buf[this.pos++];
      v |= BigInt(b & 0x7f) << shift;
      if (b < 0x80) return v;
      shift += 7n;
    }
  }
  num() {
    return Number(this.varint());
  }
  bytes() {
    const n = this.num();
    if (this.pos + n > this.end) throw new Error('truncated field');
    const b = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return b;
  }
  sub() {
    const n = this.num();
    const r = new Reader(this.buf, this.pos, this.pos + n);
    this.pos += n;
    return r;
  }
  skip(wire) {
    if (wire === 0) this.varint();
    else if (wire === 1) this.pos += 8;
    else if (wire === 2) this.bytes();
    else if (wire === 5) this.pos += 4;
    else throw new Error(`unexpected wire type ${wire}`);
  }
  // Each field as [number, wire type]; the value is read by the caller.
  *fields() {
    while (this.more()) {
      const key = this.num();
      yield [key >>> 3, key & 7];
    }
  }
}

const utf8 = new TextDecoder();

// TraceProcessorRpc.TraceProcessorMethod
const TPM_APPEND_TRACE_DATA = 1;
const TPM_FINALIZE_TRACE_DATA = 2;
const TPM_QUERY_STREAMING = 3;

// QueryResult.CellsBatch.CellType
const CELL_NULL = 1;
const CELL_VARINT = 2;
const CELL_FLOAT64 = 3;
const CELL_STRING = 4;
const CELL_BLOB = 5;

// One TraceProcessorRpc response message → the fields we use.
function decodeRpc(r) {
  const m = {};
  for (const [num, wire] of r.fields()) {
    if (num === 3 && wire === 0) m.response = r.num();
    else if (num === 4 && wire === 0) m.invalidRequest = r.num();
    else if (num === 5 && wire === 2) m.fatalError = utf8.decode(r.bytes());
    else if ((num === 201 || num === 212) && wire === 2) {
      // AppendTraceDataResult.error = 2; FinalizeDataResult.error = 1.
      const sub = r.sub();
      for (const [n, w] of sub.fields()) {
        if (w === 2 && ((num === 201 && n === 2) || (num === 212 && n === 1))) {
          m.error = utf8.decode(sub.bytes());
        } else sub.skip(w);
      }
    } else if (num === 203 && wire === 2) m.queryResult = r.sub();
    else r.skip(wire);
  }
  return m;
}

// Appends one QueryResult message's columns, rows and error to `q`; returns whether it held
// the last batch.
function decodeQueryResult(r, q) {
  let last = false;
  for (const [num, wire] of r.fields()) {
    if (num === 1 && wire === 2) q.columns.push(utf8.decode(r.bytes()));
    else if (num === 2 && wire === 2) q.error = utf8.decode(r.bytes());
    else if (num === 3 && wire === 2) {
      const b = r.sub();
      const cells = [];
      const ints = [];
      const doubles = [];
      const blobs = [];
      let strings = [];
      for (const [n, w] of b.fields()) {
        if ((n === 1 || n === 2) && w === 2) {
          const p = b.sub();
          while (p.more()) (n === 1 ? cells : ints).push(p.varint());
        } else if (n === 1 && w === 0) cells.push(b.varint());
        else if (n === 2 && w === 0) ints.push(b.varint());
        else if (n === 3 && w === 2) {
          const p = b.bytes();
          const dv = new DataView(p.buffer, p.byteOffset, p.byteLength);
          for (let i = 0; i + 8 <= p.length; i += 8) doubles.push(dv.getFloat64(i, true));
        } else if (n === 3 && w === 1) {
          const dv = new DataView(b.buf.buffer, b.buf.byteOffset + b.pos, 8);
          doubles.push(dv.getFloat64(0, true));
          b.pos += 8;
        } else if (n === 4 && w === 2) blobs.push(Array.from(b.bytes()));
        else if (n === 5 && w === 2) {
          // NUL-terminated strings, concatenated.
          strings = utf8.decode(b.bytes()).split('\0');
        } else if (n === 6 && w === 0) last = b.varint() !== 0n;
        else b.skip(w);
      }
      const idx = { i: 0, d: 0, s: 0, b: 0 };
      for (const c of cells) {
        let v;
        switch (Number(c)) {
          case CELL_NULL:
            v = null;
            break;
          case CELL_VARINT:
            v = BigInt.asIntN(64, ints[idx.i++]);
            break;
          case CELL_FLOAT64:
            v = doubles[idx.d++];
            break;
          case CELL_STRING:
            v = strings[idx.s++];
            break;
          case CELL_BLOB:
            v = blobs[idx.b++];
            break;
          default:
            throw new Error(`unknown cell type ${c}`);
        }
        q.cells.push(v);
      }
    } else r.skip(wire);
  }
  return last;
}

// --- The engine.

function loadEngine(dir) {
  const wasmPath = path.join(dir, 'trace_processor.wasm');
  const gluePath = path.join(dir, 'engine_bundle.node.js');
  for (const f of [wasmPath, gluePath]) {
    if (!fs.existsSync(f)) die(`${f} is missing: run scripts/setup.sh`);
  }
  // The worker scope the bundle expects: Emscripten picks its web-worker loader when
  // WorkerGlobalScope exists, and loads the wasm synchronously with XMLHttpRequest, which
  // we answer from the file.
  globalThis.self = globalThis;
  globalThis.WorkerGlobalScope = function WorkerGlobalScope() {};
  globalThis.location = { href: `file://${dir}/` };
  globalThis.XMLHttpRequest = class {
    open(_method, url) {
      this.url = url;
    }
    send() {
      const name = path.basename(String(this.url));
      if (name !== 'trace_processor.wasm') die(`the engine asked for ${this.url}`);
      const b = fs.readFileSync(wasmPath);
      this.response = b.buffer.slice(b.byteOffset, b.byteOffset + b.byteLength);
    }
  };
  // The package ships the 32-bit build only; where node supports memory64 (newer V8s) the
  // bridge would ask for trace_processor_memory64.wasm, so its feature probe (a 23-byte
  // module declaring a 64-bit memory) is made to fail.
  const RealModule = WebAssembly.Module;
  WebAssembly.Module = function Module(bytes) {
    if (bytes.length === 23) throw new Error('memory64 disabled');
    return new RealModule(bytes);
  };
  WebAssembly.Module.prototype = RealModule.prototype;
  // The engine logs to the console: keep stdout for our JSON.
  console.log = console.info = (...a) => process.stderr.write(a.join(' ') + '\n');
  try {
    vm.runInThisContext(fs.readFileSync(gluePath, 'utf8'), { filename: gluePath });
  } finally {
    WebAssembly.Module = RealModule;
  }
  if (typeof globalThis.onmessage !== 'function') die(`${gluePath}: not the engine worker bundle`);
  const port = {
    replies: [],
    postMessage(data) {
      this.replies.push(data);
    },
  };
  // The worker's bootstrap message hands it the port; it sets port.onmessage.
  globalThis.onmessage({ data: port });
  if (typeof port.onmessage !== 'function') die('the engine did not take the port');
  return port;
}

let txSeq = 0;
let rxBuf = new Uint8Array(0);

// Sends one request (TraceProcessorRpc: seq = 1, request = 2, its argument) and returns the
// response messages it produced, decoded.
function rpc(port, method, arg) {
  const msg = new Writer().uint(1, txSeq++).uint(2, method);
  if (arg) msg.bytes(arg[0], arg[1]);
  const stream = new Writer().bytes(1, msg.finish()).finish(); // TraceProcessorRpcStream.msg
  port.replies = [];
  port.onmessage({ data: new Uint8Array(stream.buffer, stream.byteOffset, stream.length) });
  // The responses are a byte stream of TraceProcessorRpcStream.msg fields, in whatever
  // pieces the engine posted: join them (with any partial message left over), then split.
  const all = Buffer.concat([rxBuf, ...port.replies]);
  const out = [];
  let pos = 0;
  for (;;) {
    const r = new Reader(all, pos);
    if (!r.more()) break;
    let m;
    try {
      if (r.num() !== ((1 << 3) | 2)) die('unexpected data from the engine');
      m = r.sub();
    } catch (e) {
      break; // a partial header: the rest comes with the next request's responses
    }
    if (m.end > all.length) break; // a partial message, likewise
    out.push(decodeRpc(m));
    pos = m.end;
  }
  rxBuf = all.subarray(pos);
  for (const m of out) {
    if (m.fatalError) die(`trace processor fatal error: ${m.fatalError}`);
    if (m.invalidRequest !== undefined) die(`trace processor refused request ${m.invalidRequest}`);
  }
  return out;
}

function expectOne(out, method, what) {
  const m = out.find((x) => x.response === method);
  if (!m) die(`no response to ${what}`);
  if (m.error) die(`${what}: ${m.error}`);
}

function query(port, sql) {
  const args = new Writer().bytes(1, Buffer.from(sql, 'utf8')).finish(); // QueryArgs.sql_query
  const q = { columns: [], cells: [], error: null };
  const out = rpc(port, TPM_QUERY_STREAMING, [103, args]);
  let last = false;
  for (const m of out) {
    if (m.response === TPM_QUERY_STREAMING && m.queryResult) {
      last = decodeQueryResult(m.queryResult, q) || last;
    }
  }
  if (q.error) die(`query failed: ${q.error}\n${sql}`);
  if (!last) die(`query did not finish: ${sql}`);
  const n = q.columns.length;
  const rows = [];
  for (let i = 0; n > 0 && i < q.cells.length; i += n) rows.push(q.cells.slice(i, i + n));
  return { columns: q.columns, rows };
}

// JSON with BigInts as exact numbers.
function toJson(v) {
  if (typeof v === 'bigint') return v.toString();
  if (typeof v === 'number') return Number.isFinite(v) ? JSON.stringify(v) : 'null';
  if (Array.isArray(v)) return `[${v.map(toJson).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    return `{${Object.entries(v)
      .map(([k, x]) => `${JSON.stringify(k)}:${toJson(x)}`)
      .join(',')}}`;
  }
  return JSON.stringify(v);
}

async function main() {
  const [trace, ...sqls] = process.argv.slice(2);
  if (!trace || sqls.length === 0) die('usage: tp_query.js TRACE_FILE SQL [SQL...]');
  const data = fs.readFileSync(trace);
  const port = loadEngine(engineDir());
  // The module is instantiated synchronously, but the bridge opens its RPC endpoint in a
  // promise callback (on runtime init): let the microtasks run first.
  await new Promise((resolve) => setImmediate(resolve));
  // In chunks, as the UI feeds a file.
  const CHUNK = 16 << 20;
  for (let off = 0; off < data.length; off += CHUNK) {
    const chunk = data.subarray(off, off + CHUNK);
    expectOne(rpc(port, TPM_APPEND_TRACE_DATA, [101, chunk]), TPM_APPEND_TRACE_DATA, 'loading the trace');
  }
  expectOne(rpc(port, TPM_FINALIZE_TRACE_DATA), TPM_FINALIZE_TRACE_DATA, 'finalizing the trace');
  const results = sqls.map((sql) => query(port, sql));
  process.stdout.write(toJson(results) + '\n');
}

main().catch((e) => die(e.stack || e));
