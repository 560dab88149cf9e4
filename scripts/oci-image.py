#!/usr/bin/env python3
"""Writes the image the Dockerfile describes as an OCI image layout, without Docker.

    oci-image.py DOCKERFILE BUILD_ROOT OUT_DIR [TAG]

Reads the Dockerfile's last stage, which must start `FROM scratch`, and
interprets COPY (`--from=<stage>`, `--chown`, `--chmod`), USER, ENV, EXPOSE,
VOLUME, LABEL, HEALTHCHECK, ENTRYPOINT and CMD; anything else is refused.
COPY sources are taken from BUILD_ROOT, a directory that stands for the build
stage's file system. The files go into one gzipped layer; the config follows
the OCI image spec, plus Docker's `Healthcheck` field (OCI has none; Docker
reads it from an OCI image's config). The output is reproducible: fixed
times (SOURCE_DATE_EPOCH, default 0), sorted entries, owner ids only.

umoci and skopeo (Debian) cannot set a HEALTHCHECK, which is why this is a
script; they read and check its output (scripts/test-dist.sh).
"""

import gzip
import hashlib
import io
import json
import os
import re
import shlex
import sys
import tarfile
from datetime import datetime, timezone

EPOCH = int(os.environ.get("SOURCE_DATE_EPOCH", "0"))
DURATION = re.compile(r"^(\d+)(ms|s|m|h)$")
NANOS = {"ms": 10**6, "s": 10**9, "m": 60 * 10**9, "h": 3600 * 10**9}


def instructions(path):
    """(keyword, rest) of the last stage, continuation lines joined, comments dropped."""
    text = open(path, encoding="utf-8").read()
    lines, pending = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        lines.append(pending + stripped)
        pending = ""
    stage = []
    for line in lines:
        keyword, _, rest = line.partition(" ")
        if keyword.upper() == "FROM":
            stage = []
        stage.append((keyword.upper(), rest.strip()))
    if not stage or stage[0][1].split()[0] != "scratch":
        sys.exit(f"oci-image: the last stage of {path} must be FROM scratch")
    return stage[1:]


def options(words):
    """Leading `--name=value` words as a dict, and the words after them."""
    found = {}
    while words and words[0].startswith("--"):
        name, _, value = words.pop(0)[2:].partition("=")
        found[name] = value
    return found, words


def exec_form(rest):
    """A JSON array (exec form); the shell form needs a shell, which scratch has not."""
    value = json.loads(rest)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"expected a JSON array of strings: {rest}")
    return value


def pairs(rest):
    """`K=V K2="V 2"` as a list of (K, V)."""
    return [tuple(word.split("=", 1)) for word in shlex.split(rest)]


def nanos(text):
    number, unit = DURATION.match(text).groups()
    return int(number) * NANOS[unit]


def healthcheck(rest):
    found, words = options(shlex.split(rest, posix=False))
    if words[0].upper() != "CMD":
        raise ValueError(f"HEALTHCHECK must be CMD [...]: {rest}")
    check = {"Test": ["CMD", *exec_form(" ".join(words[1:]))]}
    for name, key in [("interval", "Interval"), ("timeout", "Timeout"), ("start-period", "StartPeriod")]:
        if name in found:
            check[key] = nanos(found[name])
    if "retries" in found:
        check["Retries"] = int(found["retries"])
    return check


def tar_entry(name, source, uid, gid, mode):
    info = tarfile.TarInfo(name)
    info.uid, info.gid, info.mtime = uid, gid, EPOCH
    stat = os.stat(source)
    if os.path.isdir(source):
        info.type, info.mode = tarfile.DIRTYPE, mode if mode is not None else 0o755
        return info, None
    info.size, info.mode = stat.st_size, mode if mode is not None else (stat.st_mode & 0o7777)
    return info, source


def copy_entries(rest, build_root):
    """The tar entries of one COPY (a file or a directory tree)."""
    found, words = options(shlex.split(rest))
    if "from" not in found or len(words) != 2:
        raise ValueError(f"COPY must be --from=<stage> SRC DEST: {rest}")
    uid, _, gid = found.get("chown", "0:0").partition(":")
    uid, gid = int(uid), int(gid or uid)
    mode = int(found["chmod"], 8) if "chmod" in found else None
    source, dest = os.path.join(build_root, words[0].lstrip("/")), words[1].strip("/")
    entries = [tar_entry(dest, source, uid, gid, mode)]
    for parent, dirs, files in os.walk(source):
        for name in sorted(dirs) + sorted(files):
            path = os.path.join(parent, name)
            entries.append(tar_entry(os.path.join(dest, os.path.relpath(path, source)), path, uid, gid, mode))
    return entries


def interpret(stage, build_root):
    """The layer's entries and the image config's `config` object."""
    config, entries = {}, []
    handlers = {
        "USER": lambda rest: config.__setitem__("User", rest),
        "ENV": lambda rest: config.setdefault("Env", []).extend(f"{k}={v}" for k, v in pairs(rest)),
        "EXPOSE": lambda rest: config.setdefault("ExposedPorts", {}).update(
            {p if "/" in p else p + "/tcp": {} for p in rest.split()}),
        "VOLUME": lambda rest: config.setdefault("Volumes", {}).update({v: {} for v in exec_form(rest)}),
        "LABEL": lambda rest: config.setdefault("Labels", {}).update(dict(pairs(rest))),
        "HEALTHCHECK": lambda rest: config.__setitem__("Healthcheck", healthcheck(rest)),
        "ENTRYPOINT": lambda rest: config.__setitem__("Entrypoint", exec_form(rest)),
        "CMD": lambda rest: config.__setitem__("Cmd", exec_form(rest)),
        "COPY": lambda rest: entries.extend(copy_entries(rest, build_root)),
    }
    for keyword, rest in stage:
        if keyword not in handlers:
            sys.exit(f"oci-image: {keyword} is not supported in the final stage")
        handlers[keyword](rest)
    return entries, config


def layer(entries):
    """(gzipped tar, sha256 of the tar): the diff id is the uncompressed digest."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, source in sorted(entries, key=lambda e: e[0].name):
            if source is None:
                tar.addfile(info)
            else:
                with open(source, "rb") as data:
                    tar.addfile(info, data)
    plain = raw.getvalue()
    return gzip.compress(plain, compresslevel=9, mtime=0), hashlib.sha256(plain).hexdigest()


def blob(out, data):
    """Writes a blob; returns its descriptor's digest and size."""
    digest = hashlib.sha256(data).hexdigest()
    os.makedirs(os.path.join(out, "blobs", "sha256"), exist_ok=True)
    with open(os.path.join(out, "blobs", "sha256", digest), "wb") as f:
        f.write(data)
    return {"digest": "sha256:" + digest, "size": len(data)}


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def main(dockerfile, build_root, out, tag="latest"):
    entries, config = interpret(instructions(dockerfile), build_root)
    compressed, diff_id = layer(entries)
    created = datetime.fromtimestamp(EPOCH, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    image = {
        "created": created,
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + diff_id]},
        "history": [{"created": created, "created_by": f"scripts/oci-image.py {os.path.basename(dockerfile)}"}],
    }
    layer_desc = {"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **blob(out, compressed)}
    config_desc = {"mediaType": "application/vnd.oci.image.config.v1+json", **blob(out, canonical(image))}
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config_desc,
        "layers": [layer_desc],
    }
    manifest_desc = {
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        **blob(out, canonical(manifest)),
        "platform": {"architecture": "amd64", "os": "linux"},
        "annotations": {"org.opencontainers.image.ref.name": tag},
    }
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": [manifest_desc]}
    with open(os.path.join(out, "index.json"), "wb") as f:
        f.write(canonical(index))
    with open(os.path.join(out, "oci-layout"), "wb") as f:
        f.write(canonical({"imageLayoutVersion": "1.0.0"}))


if __name__ == "__main__":
    if len(sys.argv) not in (4, 5):
        sys.exit(__doc__)
    main(*sys.argv[1:])
