#!/usr/bin/env python3
"""The longest production functions of the workspace, brace to brace.

Production means a `src/` file of a workspace crate (libs/, services/), outside `#[cfg(test)]`
modules and outside `src/**/tests.rs`. Benchmarks built into the `lakelog` binary and the
simulation count: they are code someone reads and changes.

  scripts/fn-lengths.py              the ten longest
  scripts/fn-lengths.py --top 25     the 25 longest
  scripts/fn-lengths.py --max 150    exit 1 naming every function longer than 150 lines
"""
import argparse
import os
import re
import sys

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def strip(text):
    """The text with comments, strings and char literals blanked (newlines kept), so braces
    inside them are not counted."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif (m := re.compile(r'b?r(#*)"').match(text, i)) and (
            i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")
        ):
            end = '"' + m.group(1)
            j = text.find(end, m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'" and (m := re.compile(r"'(\\.[^']*|[^\\'])'").match(text, i)):
            out.append(" " * (m.end() - i))
            i = m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def closing(code, open_at):
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


FN = re.compile(r"\bfn\s+([A-Za-z_][A-Za-z0-9_]*)")
TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{")
IMPL = re.compile(r"\bimpl\b(<[^{]*?>)?\s+(?:[^{;]*?\bfor\s+)?([A-Za-z_][A-Za-z0-9_]*)[^{;]*\{")


def functions(path):
    with open(path, encoding="utf-8") as f:
        code = strip(f.read())
    line_of = lambda at: code.count("\n", 0, at) + 1  # noqa: E731
    skip = [(m.start(), closing(code, m.end() - 1)) for m in TEST_MOD.finditer(code)]
    impls = [(m.start(), closing(code, m.end() - 1), m.group(2)) for m in IMPL.finditer(code)]
    for m in FN.finditer(code):
        at = m.start()
        if any(a <= at <= b for a, b in skip):
            continue
        brace, semi = code.find("{", m.end()), code.find(";", m.end())
        if brace < 0 or (0 <= semi < brace):
            continue  # a declaration without a body
        end = closing(code, brace)
        owner = [name for a, b, name in impls if a <= at <= b]
        name = f"{owner[-1]}::{m.group(1)}" if owner else m.group(1)
        yield name, line_of(at), line_of(end) - line_of(at) + 1


def production_files():
    for area in ("libs", "services"):
        for crate in sorted(os.listdir(os.path.join(root, area))):
            src = os.path.join(root, area, crate, "src")
            for dirpath, _, files in os.walk(src):
                for f in sorted(files):
                    if f.endswith(".rs") and f != "tests.rs" and "/tests" not in dirpath[len(src):]:
                        yield os.path.join(dirpath, f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--max", type=int, help="fail naming every function longer than this")
    args = ap.parse_args()
    found = []
    for path in production_files():
        rel = os.path.relpath(path, root)
        found += [(lines, name, f"{rel}:{line}") for name, line, lines in functions(path)]
    found.sort(key=lambda f: -f[0])
    if args.max is not None:
        over = [f for f in found if f[0] > args.max]
        for lines, name, at in over:
            print(f"fn-lengths: {name} at {at} is {lines} lines (at most {args.max})")
        if over:
            sys.exit(1)
        print(f"fn-lengths: {len(found)} production functions, none over {args.max} lines")
        return
    for lines, name, at in found[: args.top]:
        print(f"{lines:5} {name} {at}")


if __name__ == "__main__":
    main()
