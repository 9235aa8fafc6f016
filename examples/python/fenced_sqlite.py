#!/usr/bin/env python3
"""Fenced writes to SQLite under a baton lock, with the Python standard library only.

The app talks to its baton sidecar over the unix socket in BATON_SOCKET: it follows the event
stream (GET /v1/events), acquires the lock (POST /v1/locks/{id}/acquire, Try mode; only a 200 with
state "held" and a token is a grant), writes to a SQLite table with its fencing token in the WHERE
clause, and releases its grant by its token (POST /v1/locks/{id}/release {"token": N}). The database
rejects a write whose token is lower than the last one it accepted, so a writer whose lease
ran out while it was paused cannot overwrite the next holder's work (the README's safety model).

Environment:
  BATON_SOCKET   the sidecar's socket (set by the injecting webhook)
  BATON_LOCKS    the declared lock IDs, comma-separated; the first is used (set by the webhook)
  EXAMPLE_DB     the SQLite file to write to (default fenced.db)
  EXAMPLE_WAIT   how long to wait for the lock, e.g. "10s" (default 10s)

It prints one JSON line with what it did and exits 0, or 1 with a message on stderr.
"""

import http.client
import json
import os
import socket
import sqlite3
import sys
import threading


class UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTP connection over a unix socket."""

    def __init__(self, path, timeout=60):
        super().__init__("baton", timeout=timeout)
        self.path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.path)
        self.sock = sock


def call(sock_path, method, path, body=None):
    """Sends one request to the sidecar and returns (status, decoded JSON answer)."""
    conn = UnixHTTPConnection(sock_path)
    try:
        data = json.dumps(body).encode() if body is not None else b""
        conn.request(method, path, body=data, headers={"Content-Type": "application/json"})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


class Events:
    """Follows the sidecar's event stream in a thread and remembers lost tokens."""

    def __init__(self, sock_path, lock_id):
        self.lock_id = lock_id
        self.lost = set()
        self.subscribed = threading.Event()
        self.conn = UnixHTTPConnection(sock_path, timeout=None)
        self.conn.request("GET", "/v1/events")
        resp = self.conn.getresponse()
        if resp.status != 200:
            raise RuntimeError(f"event stream: status {resp.status}")
        # The sidecar answers once the subscription is registered: every later event is ours.
        self.resp = resp
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        event, data = "", []
        for raw in self.resp:
            line = raw.decode().rstrip("\r\n")
            if line.startswith(":"):
                continue  # a comment: subscribed, keepalive
            if line == "":
                if data:
                    ev = json.loads("\n".join(data))
                    if (ev.get("type") or event) == "lost" and ev.get("lockId") == self.lock_id:
                        self.lost.add(ev["token"])  # stop writing with this token at once
                event, data = "", []
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if field == "event":
                event = value
            elif field == "data":
                data.append(value)

    def still_held(self, token):
        return token not in self.lost


def fenced_write(db, name, value, token):
    """Writes value to row name unless a higher token wrote it since: True if it applied.

    The holder writes as often as it likes with its own token (fence <= token); any earlier
    holder's token is lower than the fence from the first write of a later one on.
    """
    cur = db.execute(
        "UPDATE resource SET value = ?, fence = ? WHERE name = ? AND fence <= ?",
        (value, token, name, token),
    )
    db.commit()
    return cur.rowcount == 1


def main():
    sock_path = os.environ["BATON_SOCKET"]
    lock_id = os.environ["BATON_LOCKS"].split(",")[0]
    wait = os.environ.get("EXAMPLE_WAIT", "10s")
    db = sqlite3.connect(os.environ.get("EXAMPLE_DB", "fenced.db"))
    db.execute("CREATE TABLE IF NOT EXISTS resource (name TEXT PRIMARY KEY, value TEXT, fence INTEGER NOT NULL)")
    db.execute("INSERT OR IGNORE INTO resource (name, value, fence) VALUES ('report', '', 0)")
    db.commit()

    events = Events(sock_path, lock_id)  # subscribe first, then acquire
    status, st = call(sock_path, "POST", f"/v1/locks/{lock_id}/acquire", {"wait": wait})
    # Only a 200 with state "held" and a token grants the lock. A 409 "acquiring" or "held_by_pod"
    # means another process of this pod is getting or holds it: not ours.
    token = st.get("token")
    if status != 200 or st.get("state") != "held" or not isinstance(token, int) or token <= 0:
        sys.exit(f"not granted: {status} {st}")
    try:
        written = events.still_held(token) and fenced_write(db, "report", f"written by python with token {token}", token)
        # A writer with an older token (a paused earlier holder) is turned away by the database.
        stale = fenced_write(db, "report", "stale", token - 1)
    finally:
        # Release this grant only: if it ended and another process of the pod was granted the
        # lock since, the sidecar answers 409 "token_mismatch" and leaves that grant alone.
        call(sock_path, "POST", f"/v1/locks/{lock_id}/release", {"token": token})
    print(json.dumps({"lock": lock_id, "token": token, "written": written, "staleAccepted": stale}))


if __name__ == "__main__":
    main()
