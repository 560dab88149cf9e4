#!/usr/bin/env python3
"""Fails when modules of a crate import each other in a circle.

For each crate's `src/`, every file is a module; an import is any
`crate::a::b` or `super::x` path outside comments, `#[cfg(doc)]` imports and
`#[cfg(test)]` test modules (tests may reach anywhere). Modules are compared at one
level: the top-level modules of the crate, and the sibling submodules of
one module (a child using its parent, or a parent its children, is how
Rust modules are built, not a cycle). Prints each cycle found.

Usage: scripts/check-cycles.py core/src host-native/src host-wasm/src
"""

import os
import re
import sys

PATH = re.compile(r"\b(crate|super)((?:::\w+)+)")
DOC_ONLY = re.compile(r"#\[cfg\(doc\)\]\s*use [^;]*;")
TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(pub(\(crate\))?\s+)?mod \w+\s*\{")


def module_path(root, path):
    parts = os.path.relpath(path, root)[: -len(".rs")].split(os.sep)
    if parts[-1] in ("mod", "lib", "main"):
        parts = parts[:-1]
    return parts


def code_of(text):
    text = TEST_MOD.split(text)[0]
    # Imported for doc links only: not a dependency of the code.
    text = DOC_ONLY.sub("", text)
    lines = [l for l in text.split("\n") if not l.lstrip().startswith("//")]
    return "\n".join(lines)


def edges_of(root):
    """{module path tuple: set of module path tuples it names}"""
    modules = {}
    for folder, _, files in os.walk(root):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(folder, name)
            parts = module_path(root, path)
            if parts and (parts[-1] == "tests" or parts[-1].endswith("_tests")):
                continue
            with open(path, encoding="utf-8") as f:
                code = code_of(f.read())
            named = set()
            for base, rest in PATH.findall(code):
                segs = rest.strip(":").split("::")
                if base == "crate":
                    named.add(tuple(segs))
                else:
                    # `super` in a file module is its parent (a mod.rs: its own parent).
                    named.add(tuple(parts[:-1] + segs))
            modules[tuple(parts)] = named
    return modules


def resolve(modules, target):
    """The longest prefix of `target` that is a module."""
    for n in range(len(target), 0, -1):
        if target[:n] in modules:
            return target[:n]
    return None


def cycles(graph):
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def main(roots):
    bad = 0
    for root in roots:
        modules = edges_of(root)
        # One graph per parent: its children, and which child names which sibling.
        graphs = {}
        for module, named in modules.items():
            if not module:
                continue
            parent, me = module[:-1], module[: len(module)]
            graph = graphs.setdefault(parent, {})
            graph.setdefault(me, set())
            for target in named:
                target = resolve(modules, target)
                if target is None or len(target) <= len(parent):
                    continue
                sibling = target[: len(parent) + 1]
                if target[: len(parent)] == parent and sibling != me:
                    graph[me].add(sibling)
        for parent, graph in sorted(graphs.items()):
            for comp in cycles(graph):
                bad += 1
                names = ["::".join(m) for m in comp]
                print(f"{root}: import cycle: {' <-> '.join(names)}")
                for m in comp:
                    print(f"    {'::'.join(m)} -> {', '.join('::'.join(t) for t in sorted(graph[m]) if t in comp)}")
    if bad:
        sys.exit(1)
    print(f"no import cycles in {', '.join(roots)}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["core/src", "host-native/src", "host-wasm/src"])
