"""What Python's `email` package (policy.default) reads in each message of a
folder: the reference that core/tests/message_reference.rs compares mailjar's
parse with.

Usage: python3 email_reference.py FOLDER
Prints one JSON object: relative path (with "/") -> fields, for every file
below FOLDER but README.md, in sorted order:

  subject      the first Subject header as a string ("" when absent)
  text         get_body(("plain",)).get_content(), or null without one
  textCte      that part's Content-Transfer-Encoding, lower-cased
  html         get_body(("html",)).get_content(), or null without one
  links        http(s) hrefs of <a> and <area> in `html` (html.parser), then
               http(s) URLs in `text`, de-duplicated, in first-seen order
  joinedLinks  the links with `text` joined by line breaks to the text of
               the inline text/plain attachments without a file name
  attachments  every leaf part that is neither of the two bodies, depth
               first; a message/* part is one leaf (not entered):
               filename, contentType, size (decoded bytes; for text/* the
               UTF-8 form of get_content(); for message/* the body the
               generator writes), inline (no Content-Disposition
               attachment), text and cte (the content and transfer
               encoding of an inline text/plain part)
  unknownCharsets  charsets Python has no codec for (read as UTF-8)
  error        set instead of the fields when Python raised

Strings are made JSON-safe: lone surrogates (Python's surrogateescape of
undecodable bytes) become U+FFFD.
"""

import email
import email.policy
import html.parser
import json
import os
import re
import sys

URL = re.compile(r'https?://[^\s<>"\x00-\x1f\x7f]+', re.IGNORECASE)
TRAILING = set(".,;:!?'*_~`>…。、，»”’")
CLOSING = {")": "(", "]": "[", "}": "{"}


def safe(s):
    """A string without lone surrogates."""
    if s is None:
        return None
    return s.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def trim_url_end(url):
    """Trailing sentence punctuation off; a closing bracket the URL opened stays."""
    while url:
        last = url[-1]
        if last in CLOSING:
            if url.count(CLOSING[last]) >= url.count(last):
                break
        elif last not in TRAILING:
            break
        url = url[:-1]
    return url


def scheme_len(url):
    return 8 if url[4:5].lower() == "s" else 7


def text_urls(text):
    for m in URL.finditer(text):
        if m.start() > 0 and text[m.start() - 1].isalnum():
            continue
        url = trim_url_end(m.group(0))
        host = url[scheme_len(url):scheme_len(url) + 1]
        if host and (host.isalnum() or host == "["):
            yield url


class Hrefs(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.hrefs = []

    def handle_starttag(self, tag, attrs):
        if tag not in ("a", "area"):
            return
        for name, value in attrs:
            if name == "href":
                if value is not None:
                    self.hrefs.append(value)
                return

    handle_startendtag = handle_starttag


def html_links(body):
    parser = Hrefs()
    parser.feed(body)
    parser.close()
    for href in parser.hrefs:
        url = re.sub(r"[\t\n\r]", "", href.strip())
        low = url[:8].lower()
        if (low.startswith("http://") or low.startswith("https://")) and len(url) > scheme_len(url):
            yield url


UNKNOWN_CHARSETS = set()


def links(markup, text):
    found = []
    for url in list(html_links(markup or "")) + list(text_urls(text or "")):
        if safe(url) not in found:
            found.append(safe(url))
    return found


def joinable(attachment):
    """An inline text/plain part without a file name: mailjar joins it to the text."""
    return (
        attachment["inline"]
        and attachment["contentType"] == "text/plain"
        and not attachment["filename"]
    )


def content(part):
    """get_content(), a str for text parts; a charset Python has no codec
    for is read as UTF-8 (as mailjar reads one it does not know), and noted."""
    try:
        value = part.get_content()
    except LookupError:
        UNKNOWN_CHARSETS.add(part.get_param("charset", "").lower())
        value = part.get_payload(decode=True).decode("utf-8", "replace")
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def size(part, linesep):
    if part.get_content_maintype() == "text":
        return len(content(part).encode("utf-8", "surrogatepass"))
    if part.get_content_maintype() == "message" and part.is_multipart():
        # Python keeps no bytes of a message/* part, only what it parsed:
        # its body as the generator writes it again.
        policy = part.policy.clone(linesep=linesep, refold_source="none")
        data = part.as_bytes(policy=policy)
        # After the part's own header block (just a line end when it has none).
        end = linesep.encode() if not part.keys() else (linesep * 2).encode()
        at = data.find(end)
        return len(data) - at - len(end) if at >= 0 else 0
    payload = part.get_payload(decode=True)
    return len(payload) if payload is not None else 0


def cte(part):
    return str(part.get("content-transfer-encoding", "")).strip().lower()


def leaves(part):
    if part.get_content_maintype() == "multipart" and part.is_multipart():
        for sub in part.iter_parts():
            yield from leaves(sub)
    else:
        yield part


def read(raw):
    UNKNOWN_CHARSETS.clear()
    linesep = "\r\n" if b"\r\n" in raw else "\n"
    msg = email.message_from_bytes(raw, policy=email.policy.default)
    subject = msg["subject"]
    plain = msg.get_body(("plain",))
    rich = msg.get_body(("html",))
    text = content(plain) if plain is not None else None
    markup = content(rich) if rich is not None else None
    attachments = []
    for part in leaves(msg):
        if part is plain or part is rich:
            continue
        inline = not part.is_attachment()
        entry = {
            "filename": safe(part.get_filename() or ""),
            "contentType": part.get_content_type(),
            "size": size(part, linesep),
            "inline": inline,
        }
        if inline and part.get_content_type() == "text/plain":
            entry["text"] = safe(content(part))
            entry["cte"] = cte(part)
        attachments.append(entry)
    joined = [text or ""] + [
        a["text"] for a in attachments if joinable(a) and a["text"]
    ]
    return {
        "subject": safe(str(subject) if subject is not None else ""),
        "text": safe(text),
        "textCte": cte(plain) if plain is not None else None,
        "html": safe(markup),
        "links": links(markup, text),
        "joinedLinks": links(markup, "\n".join(t for t in joined if t)),
        "attachments": attachments,
        "unknownCharsets": sorted(UNKNOWN_CHARSETS),
    }


def main():
    root = sys.argv[1]
    out = {}
    paths = []
    for folder, _, files in os.walk(root):
        for name in files:
            paths.append(os.path.join(folder, name))
    for path in sorted(paths):
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        if rel == "README.md":
            continue
        with open(path, "rb") as f:
            raw = f.read()
        try:
            out[rel] = read(raw)
        except Exception as e:  # noqa: BLE001 - any failure is a reported difference
            out[rel] = {"error": f"{type(e).__name__}: {e}"}
    json.dump(out, sys.stdout, ensure_ascii=True)


if __name__ == "__main__":
    main()
