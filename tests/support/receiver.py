"""A webhook receiver for Gantry's tests.

It verifies every request with the `standardwebhooks` package (the
specification's own Python library, independent of the server's code),
answers as told, and appends one JSON line per request to a log:
{"id", "timestamp", "verified", "type", "answered", "body"}.

Usage: receiver.py LOG [--fail-first N] [--delay-first SECONDS]
  --fail-first N     answer 500 to the first N requests of each webhook-id
  --delay-first S    wait S seconds before answering the first request
It prints its port on the first line of stdout. POST /control/secret with
the endpoint's secret as the body before events arrive.
"""

import argparse
import http.server
import json
import threading
import time

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

parser = argparse.ArgumentParser()
parser.add_argument("log")
parser.add_argument("--fail-first", type=int, default=0)
parser.add_argument("--delay-first", type=float, default=0.0)
args = parser.parse_args()

lock = threading.Lock()
state = {"secret": None, "seen": {}, "requests": 0}


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *_):
        pass

    def answer(self, status, text):
        body = text.encode()
        self.send_response(status)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path == "/control/secret":
            with lock:
                state["secret"] = body.decode()
            return self.answer(200, "ok")
        headers = {k.lower(): v for k, v in self.headers.items()}
        message = headers.get("webhook-id", "")
        with lock:
            secret = state["secret"]
            state["requests"] += 1
            first = state["requests"] == 1
            tries = state["seen"].get(message, 0) + 1
            state["seen"][message] = tries
        if first and args.delay_first:
            time.sleep(args.delay_first)
        try:
            parsed = Webhook(secret).verify(body, headers) if secret else None
            verified = parsed is not None
        except WebhookVerificationError:
            parsed, verified = None, False
        status = 500 if tries <= args.fail_first else 200
        record = {
            "id": message,
            "timestamp": headers.get("webhook-timestamp"),
            "verified": verified,
            "type": (parsed or {}).get("type"),
            "answered": status,
            "body": json.loads(body or b"null"),
        }
        with lock, open(args.log, "a") as log:
            log.write(json.dumps(record) + "\n")
        self.answer(status, "received" if status == 200 else "try again")


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
