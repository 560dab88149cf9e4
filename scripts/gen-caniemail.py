#!/usr/bin/env python3
"""Turns a checkout of the caniemail data set into core/src/checks/caniemail_data.rs.

Usage: scripts/gen-caniemail.py PATH/TO/caniemail [OUT.rs]

Reads every `_features/*.md` front matter (YAML, as Jekyll reads it) and keeps,
for each feature the HTML check can detect, its title, what to look for in a
message (the "needles" of core/src/checks/html.rs) and its support in the
common mail clients listed in CLIENTS below: the latest version the data set
lists for each client and platform. Nothing is fetched at run time; run this
again on a newer checkout to refresh the table. Needs Python 3 and PyYAML
(Debian's python3-yaml).
"""
import glob
import os
import subprocess
import sys

import yaml

# (family, platform, name shown): the latest version of each is used.
CLIENTS = [
    ("apple-mail", "macos", "Apple Mail macOS"),
    ("apple-mail", "ios", "Apple Mail iOS"),
    ("gmail", "desktop-webmail", "Gmail webmail"),
    ("gmail", "mobile-webmail", "Gmail mobile webmail"),
    ("gmail", "ios", "Gmail iOS"),
    ("gmail", "android", "Gmail Android"),
    ("outlook", "windows", "Outlook Windows"),
    ("outlook", "windows-mail", "Windows Mail"),
    ("outlook", "macos", "Outlook macOS"),
    ("outlook", "outlook-com", "Outlook.com"),
    ("outlook", "ios", "Outlook iOS"),
    ("outlook", "android", "Outlook Android"),
    ("yahoo", "desktop-webmail", "Yahoo! Mail webmail"),
    ("yahoo", "ios", "Yahoo! Mail iOS"),
    ("yahoo", "android", "Yahoo! Mail Android"),
    ("samsung-email", "android", "Samsung Email Android"),
    ("thunderbird", "macos", "Thunderbird macOS"),
]

# Features whose slug does not name what to look for by the default rules.
OVERRIDES = {
    "css-variables": ["fn:var", "custom-prop"],
    "css-display-flex": ["decl:display:flex", "decl:display:inline-flex"],
    "css-display-grid": ["decl:display:grid", "decl:display:inline-grid"],
    "css-display-none": ["decl:display:none"],
    "css-flex-direction": ["prop:flex-direction"],
    "css-flex-wrap": ["prop:flex-wrap"],
    "css-gap": ["prop:gap", "prop:column-gap", "prop:row-gap"],
    "css-grid-template": ["prop:grid-template", "prop:grid-template-columns",
                          "prop:grid-template-rows", "prop:grid-template-areas"],
    "css-block-inline-size": ["prop:block-size", "prop:inline-size"],
    "css-border-inline-block": ["prop:border-inline", "prop:border-block"],
    "css-border-inline-block-individual": [
        "prop:border-inline-start", "prop:border-inline-end",
        "prop:border-block-start", "prop:border-block-end"],
    "css-border-inline-block-longhand": [
        "prop:border-inline-width", "prop:border-inline-style", "prop:border-inline-color",
        "prop:border-block-width", "prop:border-block-style", "prop:border-block-color"],
    "css-border-radius-logical": [
        "prop:border-start-start-radius", "prop:border-start-end-radius",
        "prop:border-end-start-radius", "prop:border-end-end-radius"],
    "css-column-layout-properties": [
        "prop:columns", "prop:column-width", "prop:column-span", "prop:column-fill",
        "prop:column-rule", "prop:column-rule-width", "prop:column-rule-style",
        "prop:column-rule-color"],
    "css-comments": ["css-comment"],
    "css-important": ["important"],
    "css-inert-attribute": ["attr:inert"],
    "css-intrinsic-size": ["ident:fit-content", "ident:min-content", "ident:max-content"],
    "css-left-right-top-bottom": ["prop:left", "prop:right", "prop:top", "prop:bottom"],
    "css-margin-block-start-end": ["prop:margin-block-start", "prop:margin-block-end"],
    "css-margin-inline-block": ["prop:margin-inline", "prop:margin-block"],
    "css-margin-inline-start-end": ["prop:margin-inline-start", "prop:margin-inline-end"],
    "css-padding-block-start-end": ["prop:padding-block-start", "prop:padding-block-end"],
    "css-padding-inline-block": ["prop:padding-inline", "prop:padding-block"],
    "css-padding-inline-start-end": ["prop:padding-inline-start", "prop:padding-inline-end"],
    "css-modern-color": ["fn:lch", "fn:oklch", "fn:lab", "fn:oklab"],
    "css-nesting": ["sel:nesting"],
    "css-scroll-snap": ["prop:scroll-snap-type", "prop:scroll-snap-align", "prop:scroll-snap-stop"],
    "css-sytem-ui": ["ident:system-ui", "ident:ui-serif", "ident:ui-sans-serif",
                     "ident:ui-rounded", "ident:ui-monospace"],
    "css-unit-percent": ["unit:%"],
    "css-unit-initial": ["ident:initial"],
    "css-unit-calc": ["fn:calc"],
    "css-at-media-device-pixel-ratio": [
        "media:-webkit-device-pixel-ratio", "media:-webkit-min-device-pixel-ratio",
        "media:-webkit-max-device-pixel-ratio"],
    "css-at-media-hover": ["media:hover", "media:any-hover"],
    "css-selector-adjacent-sibling": ["sel:adjacent-sibling"],
    "css-selector-general-sibling": ["sel:general-sibling"],
    "html-anchor-links": ["link:anchor"],
    "html-mailto-links": ["link:mailto"],
    "html-comments": ["html-comment"],
    "html-doctype": ["doctype:html5"],
    "html-h1-h6": ["el:h1", "el:h2", "el:h3", "el:h4", "el:h5", "el:h6"],
    "html-lists": ["el:ul", "el:ol", "el:dl"],
    "html-semantics": ["el:article", "el:aside", "el:details", "el:figcaption", "el:figure",
                       "el:footer", "el:header", "el:main", "el:mark", "el:nav",
                       "el:section", "el:summary", "el:time"],
    "html-image-maps": ["el:map", "el:area"],
    "html-meta-color-scheme": ["meta:color-scheme", "meta:supported-color-schemes"],
    "html-srcset": ["attr:srcset", "attr:sizes"],
    "html-loading-attribute": ["attr:loading"],
    "image-jpg": ["img:jpg", "img:jpeg"],
    "image-tiff": ["img:tiff", "img:tif"],
    "image-heif": ["img:heif", "img:heic"],
    # Not detectable from the HTML alone (a header, a file's content, a MIME part).
    "amp": [], "bimi": [], "image-apng": [], "image-hdr": [],
    "css-selector-chaining": [],
}

HTML_ATTRIBUTES = {
    "align", "background", "cellpadding", "cellspacing", "dir", "height", "hidden",
    "lang", "popover", "required", "role", "target", "valign", "width",
}


def needles(slug):
    if slug in OVERRIDES:
        return OVERRIDES[slug]
    kind, _, rest = slug.partition("-")
    if kind == "css":
        for prefix, needle in (("at-media-", "media:"), ("at-", "at:"),
                               ("pseudo-class-", "pseudo:"), ("pseudo-element-", "pseudo:"),
                               ("unit-", "unit:"), ("function-", "fn:"),
                               ("selector-", "sel:")):
            if rest.startswith(prefix):
                return [needle + rest[len(prefix):]]
        if rest.endswith("-gradient") or rest in ("rgb", "rgba"):
            return ["fn:" + rest]
        return ["prop:" + rest]
    if kind == "html":
        if rest.startswith("aria-") or rest in HTML_ATTRIBUTES:
            return ["attr:" + rest]
        for typed in ("input-", "button-"):
            if rest.startswith(typed):
                return [typed[:-1] + ":" + rest[len(typed):]]
        return ["el:" + rest]
    if kind == "image":
        return ["img:" + rest]
    return []


def front_matter(path):
    text = open(path, encoding="utf-8").read()
    head = text.split("\n---", 1)[0].lstrip("-\n")
    # Jekyll's YAML reader takes tabs in these flow mappings; PyYAML does not.
    return yaml.safe_load(head.replace("\t", "    "))


def support(stats, family, platform):
    versions = (stats.get(family) or {}).get(platform) or {}
    if not versions:
        return "u"
    # The data set lists versions oldest first: the last is the latest.
    value = str(list(versions.values())[-1]).strip()
    return value[:1] if value[:1] in "yan" else "u"


def rust_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(
        os.path.dirname(__file__), "..", "core", "src", "checks", "caniemail_data.rs")
    try:
        commit = subprocess.run(["git", "-C", root, "rev-parse", "HEAD"], capture_output=True,
                                text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown"
    rows, skipped = [], []
    for path in sorted(glob.glob(os.path.join(root, "_features", "*.md"))):
        slug = os.path.basename(path)[:-3]
        if slug.startswith("_"):
            continue
        matter = front_matter(path)
        found = needles(slug)
        if not found:
            skipped.append(slug)
            continue
        stats = matter.get("stats") or {}
        letters = "".join(support(stats, f, p) for f, p, _ in CLIENTS)
        rows.append((slug, str(matter.get("title", slug)).strip(), found, letters))
    lines = [
        "// @generated by scripts/gen-caniemail.py from the caniemail data set",
        f"// (commit {commit}); see CANIEMAIL-LICENSE.md. Do not edit by hand.",
        "",
        "use super::feature::Feature;",
        "",
        "/// The common mail clients, in the order of each feature's `support` letters.",
        "pub(super) const CLIENTS: &[&str] = &[",
    ]
    lines += [f"    {rust_str(name)}," for _, _, name in CLIENTS]
    lines += ["];", "", "/// The features the check can detect, with their support per client.",
              "pub(super) const FEATURES: &[Feature] = &["]
    for slug, title, found, letters in rows:
        needle_list = ", ".join(rust_str(n) for n in found)
        lines.append(f"    Feature {{ slug: {rust_str(slug)}, title: {rust_str(title)}, "
                     f"needles: &[{needle_list}], support: b{rust_str(letters)} }},")
    lines += ["];", ""]
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    print(f"{len(rows)} features, {len(CLIENTS)} clients; not detectable: {', '.join(skipped)}",
          file=sys.stderr)
    print(out)


if __name__ == "__main__":
    main()
