#!/usr/bin/env python3
"""Checks the include graph of include/qsdp and the import graph of python/qsdp.

The house rules (DESIGN.md, CONTRIBUTING.md):
  * no cycles: no header reaches itself through its #includes, no module imports itself;
  * no upward arrow: a header under qsdp/detail/ includes no public header that reaches it back
    (public headers declare, detail/ defines; the shared vocabulary lives in headers both include);
  * detail/codec/ does not include qsdp/quantizers.hpp (the policies build on the codec math, not
    the other way round);
  * the host codec's public header does not reach CUDA device code (*.cuh).

  scripts/check_layers.py            # prints the graph's size and "layers: ok", or what is wrong
  scripts/check_layers.py --graph    # also prints every edge
"""

import ast
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
INCLUDE = ROOT / "include"
PYTHON = ROOT / "python" / "qsdp"
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.MULTILINE)


def header_graph():
    """Edges between the headers under include/qsdp, by repository-relative path."""
    headers = sorted(p for p in (INCLUDE / "qsdp").rglob("*") if p.suffix in (".hpp", ".cuh"))
    graph = {}
    for header in headers:
        edges = set()
        for kind, name in INCLUDE_RE.findall(header.read_text()):
            candidates = [INCLUDE / name]
            if kind == '"':
                candidates.insert(0, header.parent / name)
            for candidate in candidates:
                if candidate.is_file():
                    edges.add(candidate.resolve().relative_to(INCLUDE).as_posix())
                    break
        graph[header.relative_to(INCLUDE).as_posix()] = edges
    return graph


def python_graph():
    """Edges between the modules of the qsdp Python package (module-level and deferred imports)."""
    modules = {p.stem: p for p in PYTHON.glob("*.py")}
    graph = {}
    for stem, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom):
                if node.level == 1:  # from . import x / from .x import y
                    names = [node.module] if node.module else [a.name for a in node.names]
                elif node.module and node.module.startswith("qsdp."):
                    names = [node.module.split(".")[1]]
                elif node.module == "qsdp":
                    names = [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name.split(".")[1] for a in node.names if a.name.startswith("qsdp.")]
            edges.update(n for n in names if n in modules and n != stem)
        graph[f"qsdp.{stem}"] = {f"qsdp.{n}" for n in edges}
    return graph


def cycles(graph):
    """Strongly connected components of more than one node (Tarjan), and self-loops."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []
    counter = [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def reaches(graph, start):
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def main():
    headers = header_graph()
    modules = python_graph()
    problems = []
    for component in cycles(headers) + cycles(modules):
        problems.append("cycle: " + " <-> ".join(component))
    for header, edges in headers.items():
        if "/detail/" not in header:
            continue
        for target in sorted(edges):
            if "/detail/" not in target and header in reaches(headers, target):
                problems.append(f"upward: {header} includes {target}, which includes it back")
            if header.startswith("qsdp/detail/codec/") and target == "qsdp/quantizers.hpp":
                problems.append(f"upward: {header} includes qsdp/quantizers.hpp")
    device_code = sorted(h for h in reaches(headers, "qsdp/codec.hpp") if h.endswith(".cuh"))
    for header in device_code:
        problems.append(f"host codec: qsdp/codec.hpp reaches CUDA device code {header}")
    if "--graph" in sys.argv:
        for node, edges in sorted({**headers, **modules}.items()):
            for target in sorted(edges):
                print(f"{node} -> {target}")
    edge_count = sum(len(e) for e in headers.values()) + sum(len(e) for e in modules.values())
    print(f"layers: {len(headers)} headers, {len(modules)} Python modules, {edge_count} edges")
    for problem in problems:
        print(f"layers: {problem}", file=sys.stderr)
    if problems:
        print(f"layers: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print("layers: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
