# Generates a data directory as mailjar 19cb866 leaves it after a kill -9 with
# mail still only in its ingest journal (the database refusing writes).
import json, os, shutil, signal, smtplib, subprocess, sys, time, urllib.request

binary, out = sys.argv[1], sys.argv[2]
work = "/tmp/fixgen/run"
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
data, flag = os.path.join(work, "data"), os.path.join(work, "flag")
env = dict(os.environ, MAILJAR_DEBUG_FAIL_DB_WRITES_WHILE=flag)
env.pop("RUST_LOG", None)
p = subprocess.Popen([binary, "--smtp-port", "0", "--http-port", "0", "--ready-json",
                      "--data-dir", data], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
ready = json.loads(p.stdout.readline())
host, port = ready["smtp"].rsplit(":", 1)
http = ready["http"]

def get(path):
    return json.load(urllib.request.urlopen(http + path))

def message(subject, body):
    return f"From: app@app.test\r\nTo: rcpt@local.test\r\nSubject: {subject}\r\n\r\n".encode() + body + b"\r\n"

def messages(first, count):
    out = []
    for i in range(first, first + count):
        if i == 4:
            body = b"caf\xe9 cr\xe8me \xff\xfe"
        elif i == 5:
            body = b"L" * 70000
        else:
            body = f"body {i}".encode()
        out.append(message(f"upgrade {i}", body))
    return out

def send(batch, helo, login):
    with smtplib.SMTP(host, int(port), local_hostname=helo, timeout=30) as s:
        if login:
            s.login("user", "secret")
        for m in batch:
            s.sendmail("sender@app.test", ["rcpt@local.test", "second@local.test"], m)

# 0-2: journaled, then moved into the database.
send(messages(0, 3), "first.test", False)
time.sleep(2)
assert get("/health")["storage"]["ok"] is True
# 3-6: the database refuses writes: they stay in the journal only.
open(flag, "w").close()
send(messages(3, 2), "second.test", True)
send(messages(5, 2), "third.test", False)
deadline = time.time() + 10
while get("/health")["storage"]["ok"] is not False:
    assert time.time() < deadline
    time.sleep(0.05)
listed = get("/api/emails?view=summary")["emails"]
assert len(listed) == 7, listed
p.send_signal(signal.SIGKILL)
p.wait()
shutil.rmtree(out, ignore_errors=True)
os.makedirs(out)
for name in sorted(os.listdir(data)):
    src = os.path.join(data, name)
    print(name, os.path.getsize(src))
    body = open(src, "rb").read()
    if name.startswith("journal-"):
        # Space allocated ahead is zeros: cut, the test gives the file its length back.
        body = body.rstrip(b"\0")
    open(os.path.join(out, name), "wb").write(body)
json.dump([{k: e[k] for k in ("id", "subject", "receivedAt", "from", "to", "size")} for e in listed],
          open(os.path.join(out, "listed.json"), "w"), indent=1)
print(json.dumps(listed[0], indent=1))
