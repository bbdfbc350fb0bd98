#!/usr/bin/env python3
"""Import circles between the modules of a crate: the strongly connected components (of
two or more files) of the graph "file A names `crate::B…`", where B is the file or
directory module the path resolves to (`use crate::…` and inline `crate::…` paths in
code, not comments; `super::` is resolved against the file's own module; a file's
`#[cfg(test)] mod tests` is left out). Usage:
    python3 xtask/scripts/import_cycles.py crates/dp-accounting crates/dp-models …
Also prints every arrow back up to the crate root: a module naming an item that the
root file (lib.rs or main.rs) defines rather than re-exports — the root is the table of
contents, so nothing below it may depend on it. Prints each circle and arrow; exits 1
when there is one."""
import os, re, sys


def modules(src):
    """Module path (tuple) -> file, for every .rs file under src."""
    out = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith('.rs'):
                continue
            rel = os.path.relpath(os.path.join(root, f), src)[:-3].split(os.sep)
            if rel[-1] in ('mod', 'lib', 'main'):
                rel = rel[:-1]
            out[tuple(rel)] = os.path.join(root, f)
    return out


def resolve(path, mods):
    """The longest module prefix of `path` that is a file."""
    for n in range(len(path), 0, -1):
        if tuple(path[:n]) in mods:
            return tuple(path[:n])
    return None


def root_items(mods):
    """Names of the items the crate root's file defines (not `use` re-exports)."""
    text = open(mods[()]).read() if () in mods else ''
    text = re.sub(r'#\[cfg\(test\)\]\s*mod tests\s*\{.*', '', text, flags=re.S)
    pattern = r'^(?:pub(?:\([^)]*\))?\s+)?(?:fn|struct|enum|const|static|type|trait)\s+(\w+)'
    return set(re.findall(pattern, text, flags=re.M))


def arrows_up(mods):
    """(module, item) for every module naming an item the root defines."""
    items, out = root_items(mods), []
    for mod, file in mods.items():
        if mod == ():
            continue
        for m in re.finditer(r'\b(crate|super)((?:::\w+)+)', code(file)):
            parts = m.group(2).strip(':').split('::')
            base = [] if m.group(1) == 'crate' else list(mod[:-1])
            path = base + parts
            if resolve(path, mods) is None and path and path[0] in items:
                out.append((mod, path[0]))
    return sorted(set(out))


def code(file):
    """The file's text without its test module and comments."""
    text = open(file).read()
    text = re.sub(r'#\[cfg\(test\)\]\s*mod tests\s*\{.*', '', text, flags=re.S)
    # Doc and plain comments name paths without importing them.
    return '\n'.join(l for l in text.splitlines() if not l.lstrip().startswith('//'))


def edges(mods):
    graph = {m: set() for m in mods}
    for mod, file in mods.items():
        text = code(file)
        for m in re.finditer(r'\b(crate|super)((?:::\w+)+)', text):
            parts = m.group(2).strip(':').split('::')
            base = [] if m.group(1) == 'crate' else list(mod[:-1]) if not file.endswith('mod.rs') else list(mod[:-1])
            target = resolve(base + parts, mods)
            if target and target != mod and target != ():
                graph[mod].add(target)
    return graph


def sccs(graph):
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
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
            out.append(comp)

    sys.setrecursionlimit(10000)
    for v in graph:
        if v not in index:
            visit(v)
    return [c for c in out if len(c) > 1]


def main():
    found = False
    for crate in sys.argv[1:]:
        mods = modules(os.path.join(crate, 'src'))
        for comp in sccs(edges(mods)):
            found = True
            print(f"{crate}: circle: " + ' <-> '.join('::'.join(m) for m in sorted(comp)))
        for mod, item in arrows_up(mods):
            found = True
            print(f"{crate}: arrow up: {'::'.join(mod)} names the root's {item}")
    print("no import circle and no arrow up" if not found else "")
    sys.exit(1 if found else 0)


if __name__ == '__main__':
    main()
