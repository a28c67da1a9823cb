"""Structure report of the ``ragtopics`` package: import cycles, imports inside functions, Topic-kind branches.

Run ``python tools/structure.py`` for the report, ``python tools/structure.py --check`` to fail (exit 1)
on any of these (``--check-imports``: on the first two only):

- a cycle between subpackages (``ragtopics/<package>/``) through module-level imports (an import inside
  ``if TYPE_CHECKING:`` does not run and does not count);
- an import inside a function without a comment that says why (on the import's line or the line above; a run
  of imports on consecutive lines shares the comment above its first import);
- a comparison with a Topic kind (``kind == "graphrag"``, ``topic.kind != "rag"``, ``kind in (...)``)
  outside the package that owns the kinds (:data:`KINDS_PACKAGE`).

It also counts ``getattr(settings, ...)``-style reads of a settings object (``getattr`` whose first
argument is named ``settings``/``cfg`` or ends in ``.settings``) and ``# fmt: skip`` markers.

Only the standard library is used (``ast``), so it runs before the product is installed.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "ragtopics"
#: The subpackage allowed to branch on a Topic's kind.
KINDS_PACKAGE = "kinds"
#: The kind names a comparison is recognised by.
KIND_VALUES = {"rag", "graphrag", "RAG", "GRAPHRAG"}


@dataclass
class Report:
    """What the scan found; each list holds ``path:line  text`` entries."""

    modules: int = 0
    edges: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    edge_sites: dict[tuple[str, str], list[str]] = field(default_factory=lambda: defaultdict(list))
    local_imports: list[str] = field(default_factory=list)
    local_imports_unexplained: list[str] = field(default_factory=list)
    kind_branches: list[str] = field(default_factory=list)
    settings_getattrs: list[str] = field(default_factory=list)
    fmt_skips: int = 0

    def cycles(self) -> list[list[str]]:
        """Strongly connected components of more than one subpackage (Tarjan's algorithm), sorted."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        found: list[list[str]] = []

        def visit(node: str) -> None:
            index[node] = low[node] = len(index)
            stack.append(node)
            on_stack.add(node)
            for nxt in sorted(self.edges.get(node, ())):
                if nxt not in index:
                    visit(nxt)
                    low[node] = min(low[node], low[nxt])
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))

        for node in sorted(set(self.edges) | {n for targets in self.edges.values() for n in targets}):
            if node not in index:
                visit(node)
        return sorted(found)


def subpackage_of(module: str) -> str | None:
    """``ragtopics.graph.store`` -> ``graph``; a top-level module (``ragtopics.errors``) -> its name; else None."""
    parts = module.split(".")
    if parts[0] != PACKAGE or len(parts) < 2:
        return None
    return parts[1]


def module_name(path: Path, base: Path = ROOT) -> str:
    """The dotted module name of a file under ``base`` (the folder that holds the package)."""
    rel = path.relative_to(base).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(node: ast.Import | ast.ImportFrom, current: str, is_package: bool) -> list[str]:
    """Absolute module names an import statement reads (relative imports resolved against ``current``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = current.split(".") if is_package else current.split(".")[:-1]
        anchor = anchor[: len(anchor) - (node.level - 1)]
        base = ".".join([*anchor, base] if base else anchor)
    return [base] + [f"{base}.{alias.name}" for alias in node.names]


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _is_kind_expr(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "kind") or (isinstance(node, ast.Attribute) and node.attr == "kind")


def _is_kind_value(node: ast.expr) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in KIND_VALUES
    if isinstance(node, ast.Attribute):  # TopicKind.GRAPHRAG
        return node.attr in KIND_VALUES
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_is_kind_value(e) for e in node.elts)
    return False


def scan_file(path: Path, report: Report, base: Path = ROOT) -> None:
    """Add one source file's findings to ``report`` (``base``: the folder that holds the package)."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines()
    tree = ast.parse(source, filename=str(path))
    current = module_name(path, base)
    here = subpackage_of(current)
    rel = path.relative_to(base)
    report.modules += 1
    report.fmt_skips += source.count("# fmt: skip")

    def where(node: ast.AST) -> str:
        line = getattr(node, "lineno", 0)
        return f"{rel}:{line}  {lines[line - 1].strip()[:110]}"

    # Imports inside functions: last line -> first line, and the first lines of those a comment explains
    # (a run of imports on consecutive lines shares the comment above its first import).
    import_start: dict[int, int] = {}
    explained_at: set[int] = set()

    def is_explained(node: ast.Import | ast.ImportFrom) -> bool:
        line = node.lineno
        if "#" in lines[line - 1] or (line >= 2 and lines[line - 2].strip().startswith("#")):
            return True
        return import_start.get(line - 1) in explained_at

    def walk(node: ast.AST, *, in_function: bool, type_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    walk_one(stmt, in_function=in_function, type_only=True)
                for stmt in child.orelse:
                    walk_one(stmt, in_function=in_function, type_only=type_only)
                continue
            walk_one(child, in_function=in_function, type_only=type_only)

    def walk_one(child: ast.AST, *, in_function: bool, type_only: bool) -> None:
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            if in_function:
                report.local_imports.append(where(child))
                import_start[child.end_lineno or child.lineno] = child.lineno
                if is_explained(child):
                    explained_at.add(child.lineno)
                else:
                    report.local_imports_unexplained.append(where(child))
            elif not type_only and here is not None:
                for target in imported_modules(child, current, path.name == "__init__.py"):
                    there = subpackage_of(target)
                    if there is not None and there != here and (base / PACKAGE / there).is_dir():
                        report.edges[here].add(there)
                        report.edge_sites[(here, there)].append(where(child))
        if isinstance(child, ast.Compare):
            sides = [child.left, *child.comparators]
            if any(_is_kind_expr(s) for s in sides) and any(_is_kind_value(s) for s in sides) and here != KINDS_PACKAGE:
                report.kind_branches.append(where(child))
        if isinstance(child, ast.Call) and isinstance(child.func, ast.Name) and child.func.id == "getattr" and child.args:
            first = child.args[0]
            if (isinstance(first, ast.Name) and first.id in ("settings", "cfg")) or (
                isinstance(first, ast.Attribute) and first.attr == "settings"
            ):
                report.settings_getattrs.append(where(child))
        nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        walk(child, in_function=nested, type_only=type_only)

    walk(tree, in_function=False, type_only=False)


def scan(base: Path = ROOT) -> Report:
    """Scan every ``.py`` file of the package under ``base`` (migration scripts excluded)."""
    report = Report()
    for path in sorted((base / PACKAGE).rglob("*.py")):
        if "migrations" in path.parts and "versions" in path.parts:
            continue
        scan_file(path, report, base)
    return report


def main(argv: list[str] | None = None) -> int:
    """Print the report; with ``--check``, exit 1 when a rule is broken (``--check-imports``: a rule on imports).
    ``-v`` lists every site."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 on a cycle, an unexplained local import or a kind branch")
    parser.add_argument("--check-imports", action="store_true", help="exit 1 on a cycle or an unexplained local import")
    parser.add_argument("-v", "--verbose", action="store_true", help="list every site")
    args = parser.parse_args(argv)
    report = scan(ROOT)
    cycles = report.cycles()
    print(f"modules scanned: {report.modules}")
    print(f"import cycles between subpackages (module level): {len(cycles)}")
    for component in cycles:
        print(f"  cycle of {len(component)}: {', '.join(component)}")
    print(
        f"imports inside functions: {len(report.local_imports)} ({len(report.local_imports_unexplained)} without a comment saying why)"
    )
    print(f"Topic-kind comparisons outside ragtopics/{KINDS_PACKAGE}/: {len(report.kind_branches)}")
    print(f"getattr() reads of a settings object: {len(report.settings_getattrs)}")
    print(f"'# fmt: skip' markers: {report.fmt_skips}")
    if args.verbose:
        for title, sites in (
            ("unexplained local imports", report.local_imports_unexplained),
            ("kind comparisons", report.kind_branches),
            ("settings getattr", report.settings_getattrs),
        ):
            print(f"\n{title}:")
            for site in sites:
                print(f"  {site}")
        print("\nsubpackage edges inside cycles:")
        in_cycle = {n for c in cycles for n in c}
        for (a, b), sites in sorted(report.edge_sites.items()):
            if a in in_cycle and b in in_cycle:
                print(f"  {a} -> {b}: {len(sites)} (first: {sites[0]})")
    imports_broken = bool(cycles or report.local_imports_unexplained)
    if args.check_imports and imports_broken:
        return 1
    return 1 if (args.check and (imports_broken or report.kind_branches)) else 0


if __name__ == "__main__":
    sys.exit(main())
