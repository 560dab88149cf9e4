#!/usr/bin/env python3
"""POP3 RETR throughput: stores 500 messages of 100 KiB over SMTP, then
retrieves them all three times with Python's poplib over one connection.

Usage: python3 benches/pop3-retr.py target/release/mailjar
(build it with `cargo build --release`). poplib's own line parsing is in
the figure: it is what a Python client gets.
"""

import json
import poplib
import smtplib
import subprocess
import sys
import time

binary = sys.argv[1]
proc = subprocess.Popen([binary, "--smtp-port", "0", "--http-port", "0", "--pop3-port", "0", "--ready-json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
ready = json.loads(proc.stdout.readline())
smtp_host, smtp_port = ready["smtp"].rsplit(":", 1)
pop_host, pop_port = ready["pop3"].rsplit(":", 1)
body = ("x" * 76 + "\r\n") * (100 * 1024 // 78)
msg = f"From: a@x.test\r\nTo: b@y.test\r\nSubject: s\r\n\r\n{body}"
s = smtplib.SMTP(smtp_host, int(smtp_port))
N = 500
for i in range(N):
    s.sendmail("a@x.test", ["b@y.test"], msg)
s.quit()
p = poplib.POP3(pop_host, int(pop_port))
p.user("u"); p.pass_("p")
count, size = p.stat()
best = None
for round_ in range(3):
    t = time.perf_counter(); total = 0
    for i in range(1, count + 1):
        resp, lines, octets = p.retr(i)
        total += octets
    dt = time.perf_counter() - t
    print(f"round {round_}: {count} RETR of {size/count/1024:.0f} KiB in {dt:.2f} s: {count/dt:.0f} messages/s, {total/dt/1e6:.1f} MB/s (poplib's own parsing included)")
p.quit()
proc.terminate()
