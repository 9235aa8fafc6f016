#!/usr/bin/env node
// Fenced writes to an HTTP resource under a baton lock, with Node's standard library only.
//
// The app talks to its baton sidecar over the unix socket in BATON_SOCKET: it follows the event
// stream (GET /v1/events), acquires the lock (POST /v1/locks/{id}/acquire, Try mode; only a 200
// with state "held" and a token is a grant), sends its write with its fencing token to a resource
// that rejects tokens lower than the highest it has accepted (409), and releases its grant by its
// token (POST /v1/locks/{id}/release {"token": N}). So a writer whose lease ran out while it was paused cannot
// overwrite the next holder's work (the README's safety model).
//
// Environment:
//   BATON_SOCKET          the sidecar's socket (set by the injecting webhook)
//   BATON_LOCKS           the declared lock IDs, comma-separated; the first is used
//   EXAMPLE_RESOURCE_URL  where writes go: POST {"token":N,"writer":"...","data":"..."}
//   EXAMPLE_WAIT          how long to wait for the lock, e.g. "10s" (default 10s)
//
// It prints one JSON line with what it did and exits 0, or 1 with a message on stderr.
'use strict';

const http = require('node:http');

const socketPath = process.env.BATON_SOCKET;
const lockId = (process.env.BATON_LOCKS || '').split(',')[0];
const resourceURL = process.env.EXAMPLE_RESOURCE_URL;
const wait = process.env.EXAMPLE_WAIT || '10s';

// request sends one HTTP request (over the sidecar's socket when opts.socketPath is set) and
// resolves to {status, body} with the body decoded from JSON.
function request(opts, body) {
  return new Promise((resolve, reject) => {
    const data = body === undefined ? '' : JSON.stringify(body);
    const req = http.request({ ...opts, headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(data) } }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (chunk) => { text += chunk; });
      res.on('end', () => {
        try {
          resolve({ status: res.statusCode, body: text ? JSON.parse(text) : {} });
        } catch (err) {
          reject(new Error(`${opts.method} ${opts.path}: ${res.statusCode} ${text}: ${err.message}`));
        }
      });
    });
    req.on('error', reject);
    req.end(data);
  });
}

const sidecar = (method, path, body) => request({ socketPath, method, path, host: 'baton' }, body);

// follow subscribes to the event stream; it resolves once the sidecar took the subscription (its
// answer's headers), so every later event, such as a lost lock, reaches onEvent.
function follow(onEvent) {
  return new Promise((resolve, reject) => {
    const req = http.request({ socketPath, method: 'GET', path: '/v1/events', host: 'baton' }, (res) => {
      if (res.statusCode !== 200) {
        reject(new Error(`event stream: status ${res.statusCode}`));
        return;
      }
      let buf = '';
      let event = '';
      let data = [];
      res.setEncoding('utf8');
      res.on('data', (chunk) => {
        buf += chunk;
        let nl;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl).replace(/\r$/, '');
          buf = buf.slice(nl + 1);
          if (line.startsWith(':')) continue; // a comment: subscribed, keepalive
          if (line === '') {
            if (data.length) {
              const ev = JSON.parse(data.join('\n'));
              ev.type = ev.type || event;
              onEvent(ev);
            }
            event = '';
            data = [];
            continue;
          }
          const i = line.indexOf(':');
          const field = i < 0 ? line : line.slice(0, i);
          const value = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
          if (field === 'event') event = value;
          if (field === 'data') data.push(value);
        }
      });
      resolve(req);
    });
    req.on('error', reject);
    req.end();
  });
}

// fencedWrite sends a write with token; it resolves to true when the resource accepted it.
async function fencedWrite(token, data) {
  const url = new URL(resourceURL);
  const res = await request({ hostname: url.hostname, port: url.port, path: url.pathname, method: 'POST' },
    { token, writer: 'node', data });
  if (res.status !== 200 && res.status !== 409) {
    throw new Error(`write: ${res.status} ${JSON.stringify(res.body)}`);
  }
  return res.status === 200 && res.body.accepted === true;
}

async function main() {
  const lost = new Set();
  const stream = await follow((ev) => {
    if (ev.type === 'lost' && ev.lockId === lockId) lost.add(ev.token); // stop writing at once
  });
  const got = await sidecar('POST', `/v1/locks/${encodeURIComponent(lockId)}/acquire`, { wait });
  // Only a 200 with state "held" and a token grants the lock. A 409 "acquiring" or "held_by_pod"
  // means another process of this pod is getting or holds it: not ours.
  const token = got.body.token;
  if (got.status !== 200 || got.body.state !== 'held' || !Number.isSafeInteger(token) || token <= 0) {
    throw new Error(`not granted: ${got.status} ${JSON.stringify(got.body)}`);
  }
  let written = false;
  let stale = false;
  try {
    written = !lost.has(token) && await fencedWrite(token, `written by node with token ${token}`);
    // A writer with an older token (a paused earlier holder) is turned away by the resource.
    stale = await fencedWrite(token - 1, 'stale');
  } finally {
    // Release this grant only: if it ended and another process of the pod was granted the lock
    // since, the sidecar answers 409 "token_mismatch" and leaves that grant alone.
    await sidecar('POST', `/v1/locks/${encodeURIComponent(lockId)}/release`, { token });
    stream.destroy();
  }
  console.log(JSON.stringify({ lock: lockId, token, written, staleAccepted: stale }));
}

main().catch((err) => {
  console.error(err.message);
  process.exit(1);
});
