"""Writes seeds for the journal_scan fuzz target to fuzz/seeds/journal_scan:
journal file bodies (what follows the 16-byte file header) in the format of
host-native/src/storage/journal.rs, with whole records, unwritten gaps and
records cut short."""
import os, struct, zlib

MAGIC = 0x6A726E6C
NONE = 0xFFFFFFFF

def field(s):
    return NONE.to_bytes(4, 'little') if s is None else struct.pack('<I', len(s)) + s

def record(n, raw, to=(b'a@local.test',), helo=b'client.test', tls=None, auth=None):
    payload = (n).to_bytes(16, 'big') + struct.pack('<Q', 1_700_000_000_000 + n)
    payload += field(b'sender@app.test') + struct.pack('<I', len(to)) + b''.join(field(t) for t in to)
    payload += field(helo) + field(b'127.0.0.1:4000')
    payload += field(tls and tls[0]) + field(tls and tls[1]) + field(auth and auth[0]) + field(auth and auth[1])
    payload += struct.pack('<I', len(raw)) + raw
    head = struct.pack('<III', MAGIC, len(payload), zlib.crc32(payload))
    head += struct.pack('<I', zlib.crc32(head))
    whole = head + payload
    return whole + b'\0' * (-len(whole) % 8)

def place(records):
    """Lays (record, bytes written) out as reservations do: 8-aligned, each
    header within one 4 KiB page, from byte 16; what is not written is zeros."""
    out = b''
    for whole, keep in records:
        at = 16 + len(out)
        aligned = -(-at // 8) * 8
        if aligned % 4096 > 4096 - 16:
            aligned = -(-aligned // 4096) * 4096
        out += b'\0' * (aligned - at)
        written = whole[:keep]
        out += written + b'\0' * (len(whole) - len(written))
    return out

ALL = 1 << 30

seeds = {
    'one': place([(record(1, b'Subject: hi\r\n\r\nbody\r\n'), ALL)]),
    'gap': place([(record(1, b'x' * 100), ALL), (record(2, b'y' * 300), 0), (record(3, b'z'), ALL)]),
    'cut': place([(record(1, b'a' * 5000), 4096 - 16), (record(2, b'b'), ALL)]),
    'fields': place([(record(7, b'\xff\xfe', to=(b'x@y', b'\xc3\xbc@z'), helo=None,
                             tls=(b'TLSv1.3', b'TLS13_AES_128_GCM_SHA256'), auth=(b'PLAIN', b'user')), ALL)]),
    'page': place([(record(n, b'p' * 900), ALL) for n in range(1, 7)]),
}
out = os.path.join(os.path.dirname(__file__), 'seeds', 'journal_scan')
os.makedirs(out, exist_ok=True)
for name, body in seeds.items():
    with open(os.path.join(out, name), 'wb') as f:
        f.write(body)
print(len(seeds), 'seeds in', out)
