"""The imports read in the data path's direction, and none of them goes round in a circle.

addon (event loop) → capture → writer process → store writer → finalize → store: each stage
may use the ones after it and the shared pieces (records, decoders, redact, lineage, ...), never
the ones before it nor the CLI. Every module's imports are read from its source (ast, function-
level imports included), so nothing is imported to check it. Cycles are looked for among the
imports that run when a module loads (a function's own import runs later: that is how
forge_record.mock's package lets its submodules share its names). A rule that today's code breaks
for a reason being worked on is listed in ALLOWED, with who removes it; an entry that no
longer matches anything fails too, so the list only shrinks.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIRS = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"][
    "package-dir"]

# (who imports, what it must not import): a module and everything under it, by prefix.
FORBIDDEN = [
    # The store is the end of the path: it knows nothing of the proxy, the CLI or what feeds it.
    *[("forge_record.store", m) for m in (
        "forge_record.addons", "forge_record.commands", "forge_record.cli", "forge_record.capture",
        "forge_record.writer_process", "forge_record.exporters", "forge_record.viewer",
        "forge_record.harness_shims", "mitmproxy", "click")],
    # The shared pieces every stage uses depend on no stage.
    *[(shared, m) for shared in ("forge_record.decoders", "forge_record.records",
                                 "forge_record.redact", "forge_record.lineage",
                                 "forge_record.sse", "forge_record.content_encoding",
                                 "forge_record.identity", "forge_record.shared_ends")
      for m in ("forge_record.store", "forge_record.addons", "forge_record.commands",
                "forge_record.cli", "forge_record.capture", "forge_record.writer_process",
                "mitmproxy", "click")],
    # The addon hands exchanges on; it never writes them itself.
    *[("forge_record.addons", m) for m in (
        "forge_record.store", "forge_record.writer_process", "forge_record.commands",
        "forge_record.cli", "click")],
    # Capture is driven by the addon but never touches mitmproxy (it is tested without it).
    *[("forge_record.capture", m) for m in (
        "forge_record.addons", "forge_record.writer_process", "forge_record.store",
        "forge_record.commands", "forge_record.cli", "mitmproxy", "click")],
    # The writer process sits between capture and the store, below the CLI.
    *[("forge_record.writer_process", m) for m in (
        "forge_record.addons", "forge_record.commands", "forge_record.cli", "mitmproxy",
        "click")],
]
# Libraries that belong to one layer.
ONLY_IN = {
    "mitmproxy": ("forge_record.addons", "forge_record.commands"),
    "click": ("forge_record.cli", "forge_record.commands", "forge_record.viewer"),
    "sqlalchemy": ("forge_record.store",),
    "alembic": ("forge_record.store",),
    # zstd as storage compression is the store's; as an HTTP content-encoding, the tee's.
    "zstandard": ("forge_record.store", "forge_record.content_encoding"),
}
ALLOWED: set[tuple[str, str]] = set()  # imports against the rules, each with who removes it


def modules() -> dict[str, Path]:
    """Every module of the installed layout, by import name (pyproject's package-dir)."""
    found = {}
    mapped = {ROOT / folder for folder in PACKAGE_DIRS.values()}
    for package, folder in PACKAGE_DIRS.items():
        base = ROOT / folder
        for path in base.rglob("*.py"):
            if any(parent in mapped and parent != base for parent in path.parents):
                continue  # a folder mapped to another package (none today, but bench links)
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


MODULES = modules()


def imports_of(name: str, path: Path, at_load: bool = False) -> set[str]:
    """What `name` imports (`at_load`: only outside functions): `from pkg import sub` names the
    submodule, not the package (its `__init__` is not what the code uses), relative imports
    resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _nodes(ast.parse(path.read_text()), at_load):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            subs = {f"{base}.{a.name}" for a in node.names} & MODULES.keys()
            found |= subs if len(subs) == len(node.names) else subs | {base}
    return found - {name}


def _nodes(tree: ast.AST, at_load: bool):
    """Every node of `tree`; with `at_load`, none inside a function body."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if not (at_load and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))):
            todo.extend(ast.iter_child_nodes(node))


GRAPH = {name: imports_of(name, path) for name, path in MODULES.items()}
AT_LOAD = {name: imports_of(name, path, at_load=True) for name, path in MODULES.items()}


def under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def violations() -> set[tuple[str, str]]:
    bad = set()
    for name, imported in GRAPH.items():
        for target in imported:
            if any(under(name, who) and under(target, what) for who, what in FORBIDDEN):
                bad.add((name, target))
            library = target.partition(".")[0]
            if library in ONLY_IN and not any(under(name, p) for p in ONLY_IN[library]):
                bad.add((name, target))
    return bad


def test_every_module_is_read():
    assert {"forge_record.capture", "forge_record.writer_process", "forge_record.store.writer",
            "forge_record.addons.recorder", "forge_record.decoders.gemini_stream",
            "forge_record.harness_shims.generic"} <= MODULES.keys()


def test_no_import_goes_against_the_data_path():
    assert violations() - ALLOWED == set()


def test_every_allowed_exception_is_still_needed():
    assert ALLOWED - violations() == set(), "remove the entries that no longer apply"


def test_no_import_cycle():
    cycle = find_cycle({name: {m for m in targets if m in AT_LOAD} for name, targets in
                        AT_LOAD.items()})
    assert cycle is None, " -> ".join(cycle or [])


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as a path that ends where it starts, or None (iterative DFS)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for start in sorted(graph):
        if start in state:
            continue
        path, stack = [start], [iter(sorted(graph[start]))]
        state[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(graph[nxt])))
    return None


@pytest.mark.parametrize(("graph", "cyclic"), [
    ({"a": {"b"}, "b": {"c"}, "c": set()}, False),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}}, True),
    ({"a": {"a"}}, True),
    ({"a": {"b", "c"}, "b": {"c"}, "c": set()}, False),
])
def test_the_cycle_finder_finds_cycles(graph, cyclic):
    assert (find_cycle(graph) is not None) == cyclic


def test_a_forbidden_import_is_caught(monkeypatch):
    monkeypatch.setitem(GRAPH, "forge_record.store.reader",
                        GRAPH["forge_record.store.reader"] | {"forge_record.addons.recorder"})
    assert ("forge_record.store.reader", "forge_record.addons.recorder") in violations()


def test_no_test_module_imports_another():
    # Shared helpers live in conftest.py (fixtures), support.py and the named helper modules
    # (claude_code_cli.py, codex_cli.py, recorded_sessions.py, ...), never in a test module.
    found = {}
    for path in sorted((ROOT / "tests").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                if name.partition(".")[0].startswith("test_"):
                    found.setdefault(path.name, []).append(name)
    assert found == {}
