#!/usr/bin/env python3
"""Checks of the distributed forms of mailjar (run by scripts/test-dist.sh):

    check.py static BIN              linkage, start-to-healthy, a message through it
    check.py image LAYOUT BIN        the OCI image: config (also in Docker's format), layer, the
                                     unpacked binary run as the image says
    check.py package CRATE_DIR LIST  every file include_str!/include_bytes! names is in `cargo package --list`

Standard library only; skopeo and umoci read the image. Prints the figures it
measures as `figure: name = value`.
"""

import hashlib
import json
import os
import re
import shutil
import signal
import smtplib
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from email.message import EmailMessage


def figure(name, value):
    print(f"figure: {name} = {value}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def wait_healthy(health_command, env, process, started, timeout=15.0):
    """Runs the health check until it exits 0; the seconds since `started`."""
    while True:
        result = subprocess.run(health_command, env=env, capture_output=True, text=True)
        if result.returncode == 0:
            return time.monotonic() - started
        assert process.poll() is None, f"mailjar exited with {process.returncode}"
        assert time.monotonic() - started < timeout, f"not healthy within {timeout} s: {result.stderr}"
        time.sleep(0.005)


def round_trip(host, smtp_port, http_port):
    """Sends one message through SMTP at `host` and reads it back over HTTP at `host`."""
    to = f"check-{os.getpid()}-{time.monotonic_ns()}@example.test"
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = "dist@example.test", to, "Your code is 731904"
    message.set_content("Confirm at https://example.test/c?t=1\n")
    with smtplib.SMTP(host, smtp_port, timeout=10) as smtp:
        smtp.send_message(message)
    url = f"http://{host}:{http_port}/api/emails/wait?to={to}&timeoutMs=5000"
    with urllib.request.urlopen(url, timeout=10) as response:
        email = json.load(response)["email"]
    assert email["codes"] == ["731904"], email
    return email


def stop(process):
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=10) == 0, f"exit {process.returncode} after SIGTERM"


def check_static(binary):
    described = subprocess.run(["file", "-b", binary], capture_output=True, text=True, check=True).stdout
    assert "statically linked" in described or "static-pie linked" in described, described
    assert "dynamically linked" not in described, described
    ldd = subprocess.run(["ldd", binary], capture_output=True, text=True)
    assert "statically linked" in ldd.stdout + ldd.stderr or "not a dynamic executable" in ldd.stderr, ldd
    figure("static binary bytes", os.path.getsize(binary))
    smtp_port, http_port = free_port(), free_port()
    # No environment at all: nothing from the host is needed.
    env = {"MAILJAR_SMTP_PORT": str(smtp_port), "MAILJAR_HTTP_PORT": str(http_port)}
    started = time.monotonic()
    process = subprocess.Popen([binary, "--log", "warn"], env=env, stdout=subprocess.DEVNULL)
    try:
        healthy = wait_healthy([binary, "health"], env, process, started)
        figure("static start-to-healthy ms", round(healthy * 1000, 1))
        round_trip("127.0.0.1", smtp_port, http_port)
    finally:
        stop(process)


def image_config(layout):
    """The manifest and the config, as skopeo reads them from the layout."""
    ref = f"oci:{layout}:latest"
    manifest = json.loads(subprocess.run(["skopeo", "inspect", "--raw", ref], capture_output=True, check=True).stdout)
    config = json.loads(
        subprocess.run(["skopeo", "inspect", "--config", "--raw", ref], capture_output=True, check=True).stdout)
    return manifest, config


def check_config(config):
    c = config["config"]
    assert config["os"] == "linux" and config["architecture"] == "amd64", config
    user = c.get("User", "")
    assert user and user.split(":")[0] not in ("0", "root"), f"the image runs as root: {user!r}"
    assert set(c["ExposedPorts"]) == {"1025/tcp", "8025/tcp"}, c["ExposedPorts"]
    env = dict(item.split("=", 1) for item in c["Env"])
    assert env["MAILJAR_SMTP_HOST"] == "0.0.0.0" and env["MAILJAR_HTTP_HOST"] == "0.0.0.0", env
    assert c["Healthcheck"]["Test"] == ["CMD", "/mailjar", "health"], c["Healthcheck"]
    assert c["Entrypoint"] == ["/mailjar"] and "/data" in c["Volumes"], c
    return env, user


def check_layer(layout, manifest, binary, user):
    """The layer's entries: the binary, /data owned by the image's user, /tmp sticky."""
    (layer,) = manifest["layers"]
    path = os.path.join(layout, "blobs", *layer["digest"].split(":"))
    with tarfile.open(path) as tar:
        entries = {member.name: member for member in tar.getmembers()}
        assert set(entries) == {"mailjar", "data", "tmp"}, sorted(entries)
        assert entries["mailjar"].mode == 0o755 and entries["mailjar"].size == os.path.getsize(binary)
        uid, gid = (int(x) for x in user.split(":"))
        assert (entries["data"].uid, entries["data"].gid) == (uid, gid), entries["data"].uid
        assert entries["tmp"].mode == 0o1777, oct(entries["tmp"].mode)
    figure("image layer bytes (compressed)", layer["size"])


def run_unpacked(rootfs, env, user, data_dir):
    """Runs the unpacked image as a runtime would: as root, chrooted into the
    image's file system as its user; otherwise the binary directly."""
    smtp_port, http_port = free_port(), free_port()
    env = {**env, "MAILJAR_SMTP_PORT": str(smtp_port), "MAILJAR_HTTP_PORT": str(http_port),
           "MAILJAR_DATA_DIR": data_dir, "MAILJAR_LOG": "warn"}
    if os.geteuid() == 0:
        prefix = [shutil.which("chroot"), f"--userspec={user}", rootfs]
    else:
        print("check: not root, so the unpacked binary runs without chroot and as this user", flush=True)
        prefix = []
    binary = "/mailjar" if prefix else os.path.join(rootfs, "mailjar")
    started = time.monotonic()
    process = subprocess.Popen([*prefix, binary], env=env, stdout=subprocess.DEVNULL)
    try:
        healthy = wait_healthy([*prefix, binary, "health"], env, process, started)
        figure("image start-to-healthy ms", round(healthy * 1000, 1))
        # Bound to all addresses: reachable on the machine's own address too.
        addresses = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
        outside = next((a for a in addresses if ":" not in a), "127.0.0.1")
        email = round_trip(outside, smtp_port, http_port)
        assert email["smtp"]["remoteAddr"].startswith(outside + ":"), email["smtp"]
        with urllib.request.urlopen(f"http://{outside}:{http_port}/health", timeout=10) as response:
            storage = json.load(response)["storage"]
        assert storage["kind"] == "sqlite" and storage["ok"], storage
    finally:
        stop(process)


def check_docker_format(layout, work):
    """Converted to Docker's format (what `docker load` and podman's HEALTHCHECK
    need), the image keeps its health check."""
    out = os.path.join(work, "v2s2")
    subprocess.run(["skopeo", "copy", "-q", "--format", "v2s2", f"oci:{layout}:latest", f"dir:{out}"],
                   check=True, capture_output=True)
    manifest = json.load(open(os.path.join(out, "manifest.json")))
    assert manifest["config"]["mediaType"] == "application/vnd.docker.container.image.v1+json", manifest
    config = json.load(open(os.path.join(out, manifest["config"]["digest"].split(":")[1])))
    check_config(config)


def check_image(layout, binary):
    manifest, config = image_config(layout)
    env, user = check_config(config)
    check_layer(layout, manifest, binary, user)
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(layout) for f in fs)
    figure("image layout bytes", total)
    work = tempfile.mkdtemp()
    try:
        check_docker_format(layout, work)
        bundle = os.path.join(work, "bundle")
        rootless = [] if os.geteuid() == 0 else ["--rootless"]
        # umoci checks every digest and the layer's diff id as it unpacks.
        subprocess.run(["umoci", "unpack", *rootless, "--image", f"{layout}:latest", bundle],
                       check=True, capture_output=True)
        rootfs = os.path.join(bundle, "rootfs")
        assert sha256(os.path.join(rootfs, "mailjar")) == sha256(binary), "the image holds another binary"
        data_dir = "/data" if os.geteuid() == 0 else os.path.join(rootfs, "data")
        run_unpacked(rootfs, env, user, data_dir)
        assert os.path.exists(os.path.join(rootfs, "data", "mailjar.db")), "nothing written to the volume"
    finally:
        shutil.rmtree(work, ignore_errors=True)


def check_package(crate_dir, listing):
    """Every include_str!/include_bytes! of the crate's sources is in the package."""
    packaged = set(open(listing, encoding="utf-8").read().split())
    missing = []
    for parent, _, files in os.walk(os.path.join(crate_dir, "src")):
        for name in files:
            source = os.path.join(parent, name)
            for included in re.findall(r'include_(?:str|bytes)!\("([^"]+)"\)', open(source, encoding="utf-8").read()):
                path = os.path.relpath(os.path.normpath(os.path.join(parent, included)), crate_dir)
                if path not in packaged:
                    missing.append(f"{source}: {included}")
    assert not missing, f"not in the package: {missing}"


if __name__ == "__main__":
    command, *args = sys.argv[1:]
    {"static": check_static, "image": check_image, "package": check_package}[command](*args)
    print(f"check {command}: ok", flush=True)
