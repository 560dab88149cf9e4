# Senders for the kill -9 checks (tests/persistence.rs and benches/system/persist.rs):
# each thread sends 2 KiB messages on one connection until the server goes away,
# printing the subject of every message that got its 250.
import smtplib, sys, threading
host, port, senders = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
lock = threading.Lock()
def run(n):
    i = 0
    try:
        with smtplib.SMTP(host, port, timeout=30) as s:
            while True:
                subject = 'sender%d-%d' % (n, i)
                msg = ('Subject: %s\r\nFrom: a@app.test\r\n\r\n' % subject + 'x' * 2000 + '\r\n').encode()
                s.sendmail('a@app.test', ['b@local.test'], msg)
                with lock:
                    print(subject, flush=True)
                i += 1
    except Exception:
        pass
threads = [threading.Thread(target=run, args=(n,)) for n in range(senders)]
for t in threads: t.start()
for t in threads: t.join()
