#!/usr/bin/env python3
"""Seeds for the `jsregex` fuzz target: every case of core/tests/data/jsregex_cases.json
as `pattern \\0 flags \\0 subject`, written to fuzz/corpus/jsregex/ (git-ignored)."""
import json
import os

here = os.path.dirname(os.path.abspath(__file__))
cases = json.load(open(os.path.join(here, "..", "core", "tests", "data", "jsregex_cases.json")))
out = os.path.join(here, "corpus", "jsregex")
os.makedirs(out, exist_ok=True)
extra = [
    ["(?<=a)(?=[\\s\\S]*b)", "", "a" * 2000],
    ["(a*)*\\1x", "", "a" * 234],
    ["(?:\\p{L}|\\p{N}|\\p{P}){150}", "iu", "abc"],
]
# Large alternations of zero-width parts before a tail that makes the lazy DFA build a state
# a byte (a miss of the cost model this target found: 50.8 ms for 0.24 ms estimated).
seed = 7
ab = ""
for _ in range(186):
    seed = (seed * 1103515245 + 12345) % 2**31
    ab += "ab"[(seed >> 16) & 1]
for part, count in [("\\b", 300), ("$|^", 150), ("()", 300)]:
    extra.append(["(?:" + "|".join([part] * count) + ")[ab]*a[ab]{8}c", "", ab])
for i, (pattern, flags, subject) in enumerate(cases["cases"] + extra):
    with open(os.path.join(out, f"case{i:04}"), "wb") as f:
        f.write(f"{pattern}\0{flags}\0{subject}".encode("utf-8", "surrogatepass"))
print(f"{len(cases['cases']) + len(extra)} seeds in {out}")
