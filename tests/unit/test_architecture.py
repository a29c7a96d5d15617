"""The house rules of the code base, checked by reading the sources (ast), not by running them.

- no import circle among nvhook/nvmount modules (every import counts: module level, inside
  functions, under TYPE_CHECKING);
- nvhook uses the engine only through its door (`nvmount.api`) and the modules below every
  stage that know nothing of drivers or containers (`ENGINE_DOOR`);
- inside nvmount, no arrow runs back up: a stage imports only earlier stages (`STAGES`, the
  data flow) and the base modules, and a base module imports no stage;
- the engine (nvmount) never imports the hook or its tools (nvhook), and the engine and the
  hook's path never import the simulator or the demo;
- ctypes only in nvmount._libc, nvmount._bpf and nvmount.discover._nvml;
- no product module over 400 lines;
- nothing newer than Python 3.9 that ruff's py39 target lets through: no `zip(strict=)`, no
  `X | Y` of types evaluated at run time (outside annotations), no `match`;
- every test has an assertion of its own (assert, pytest.raises, or a helper that asserts).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
PACKAGES = ("nvhook", "nvmount")
CTYPES_MODULES = {"nvmount._libc", "nvmount._bpf", "nvmount.discover._nvml"}
TOOLS = ("nvhook.dev.sim", "nvhook.dev.demo")
# the prestart command and what it imports (cli and commands reach every command lazily, each
# through its own loader function in nvhook.commands)
HOOK_PATH = ("nvhook.flags", "nvhook.launch.isolation", "nvhook.logs", "nvhook.hook.prestart",
             "nvhook.hook.spec_mode", "nvhook.config", "nvhook.config.model", "nvhook.config.load",
             "nvhook.hook.oci", "nvhook.hook.request",
             "nvhook.hook.device_lists", "nvhook.hook.semver", "nvhook.hook.mount", "nvhook.errors")
# what nvhook may import of nvmount: the door, the errors, the fd-safe layer, the one logger, and
# the utility modules nvhook's own code is built from (records: nvhook's record types; bounds:
# input budgets; jsonio: the strict JSON decoder, also on the GPU screen's path, which must not
# load the door; cachefile: trusted cache files). docs/architecture.md says why each.
ENGINE_DOOR = ("nvmount.api", "nvmount.errors", "nvmount.fs", "nvmount.log", "nvmount.records",
               "nvmount.bounds", "nvmount.jsonio", "nvmount.cachefile")
# nvmount's stages in data-flow order (a tuple: one stage of several modules); every other
# nvmount module is a base module, below all stages
STAGES = ("nvmount.discover", "nvmount.plan", "nvmount.container", "nvmount.apply",
          "nvmount.cgroup", "nvmount.ldcache", "nvmount.systemd",
          ("nvmount.requests", "nvmount.effects", "nvmount.pipeline"), "nvmount.api")
ASSERTING_HELPERS = ("assert", "check", "expect", "survive", "scenario", "verify", "_assert",
                     "_check", "_expect")


def product_modules() -> dict[str, Path]:
    mods: dict[str, Path] = {}
    for package in PACKAGES:
        for path in (REPO / package).rglob("*.py"):
            parts = list(path.relative_to(REPO).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join(parts)] = path
    return mods


def imported(name: str, path: Path, mods: dict[str, Path]) -> set[str]:
    """The product modules `name` imports. `from pkg import sub` counts as importing the
    submodule `pkg.sub`; `from pkg import name` as importing `pkg`."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                stem = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*stem, base] if base else stem)
            subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in mods]
            targets = subs if len(subs) == len(node.names) else [base, *subs]
        for target in targets:
            while target and target not in mods:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.add(target)
    return out


def import_graph() -> dict[str, set[str]]:
    mods = product_modules()
    return {name: imported(name, path, mods) for name, path in mods.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(root: str) -> None:
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
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

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in graph[todo.pop()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_cycle_finder_finds_a_planted_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_import_circle() -> None:
    assert cycles(import_graph()) == []


def test_engine_never_imports_the_hook_or_its_tools() -> None:
    graph = import_graph()
    bad = {f"{m} -> {t}" for m, ts in graph.items() if m.startswith("nvmount")
           for t in ts if t.startswith("nvhook")}
    assert not bad


def in_door(module: str) -> bool:
    return any(module == d or module.startswith(d + ".") for d in ENGINE_DOOR)


def test_hook_uses_the_engine_through_its_door() -> None:
    graph = import_graph()
    bad = {f"{m} -> {t}" for m, ts in graph.items() if m.startswith("nvhook")
           for t in ts if t.startswith("nvmount") and not in_door(t)}
    assert not bad, sorted(bad)


def stage_of(module: str) -> int:
    """The module's stage in `STAGES` (-1: a base module)."""
    for rank, stage in enumerate(STAGES):
        for name in (stage,) if isinstance(stage, str) else stage:
            if module == name or module.startswith(name + "."):
                return rank
    return -1


def arrows_back_up(graph: dict[str, set[str]]) -> set[str]:
    return {f"{m} -> {t}" for m, ts in graph.items() if m.startswith("nvmount")
            for t in ts if t.startswith("nvmount") and stage_of(t) > stage_of(m)}


def test_stage_order_finds_planted_arrows() -> None:
    graph = {"nvmount.fs.rootfs": {"nvmount.plan.types"},
             "nvmount.plan.mounts": {"nvmount.discover.inventory", "nvmount.records"},
             "nvmount.container.open": {"nvmount.cgroup.common"},
             "nvmount.effects": {"nvmount.requests", "nvmount.apply.steps"}}
    assert arrows_back_up(graph) == {"nvmount.fs.rootfs -> nvmount.plan.types",
                                     "nvmount.container.open -> nvmount.cgroup.common"}


def test_no_arrow_runs_back_up_the_stages() -> None:
    assert not arrows_back_up(import_graph())


@pytest.mark.parametrize("start", HOOK_PATH)
def test_hook_path_never_reaches_the_simulator_or_demo(start: str) -> None:
    reached = reachable(import_graph(), start)
    assert not {m for m in reached if m.startswith(TOOLS)}


def test_ctypes_only_in_the_ffi_modules() -> None:
    users = {name for name, path in product_modules().items()
             if "ctypes" in imported_stdlib(path)}
    assert users <= CTYPES_MODULES, users - CTYPES_MODULES


def imported_stdlib(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_no_product_module_over_400_lines() -> None:
    long = {name: n for name, path in product_modules().items()
            if (n := len(path.read_text().splitlines())) > 400}
    assert not long


def _py39_breakers(tree: ast.AST) -> list[str]:
    annotations = {id(n) for node in ast.walk(tree) for n in _annotation_nodes(node)}
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "zip"
                and any(k.arg == "strict" for k in node.keywords)):
            found.append(f"line {node.lineno}: zip(strict=) is 3.10+")
        elif isinstance(node, getattr(ast, "Match", ())):  # 3.9 has no ast.Match
            found.append(f"line {node.lineno}: match is 3.10+")
        elif (isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr)
              and id(node) not in annotations and _names_a_type(node)):
            found.append(f"line {node.lineno}: X | Y of types at run time is 3.10+")
    return found


def _annotation_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Every node inside an annotation (never evaluated: `from __future__ import annotations`)."""
    roots: list[ast.AST | None] = []
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        args = node.args
        roots += [a.annotation for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
        roots += [args.vararg and args.vararg.annotation, args.kwarg and args.kwarg.annotation,
                  node.returns]
    elif isinstance(node, ast.AnnAssign):
        roots.append(node.annotation)
    for root in roots:
        if root is not None:
            yield from ast.walk(root)


def _names_a_type(node: ast.BinOp) -> bool:
    """`int | None`, `str | Path`...: an operand that is None, a builtin type or a CamelCase
    name (constants in capitals and attributes like `A.X | A.Y` are flags: allowed)."""
    types = {"int", "str", "bytes", "float", "bool", "list", "dict", "tuple", "set", "frozenset"}
    return any((isinstance(side, ast.Constant) and side.value is None)
               or (isinstance(side, ast.Name) and (side.id in types or (
                   side.id[:1].isupper() and not side.id.isupper())))
               for side in (node.left, node.right))


def test_py39_check_finds_planted_breakers() -> None:
    src = ("x = int | None\ndef f(a: int | None) -> str | None:\n"
           "    return zip(a, a, strict=True)\n"
           "y: int | None = 1\nisinstance(1, int | float)\nFLAGS = A | B\n")
    assert [b.split(":")[0] for b in _py39_breakers(ast.parse(src))] == ["line 1", "line 3",
                                                                         "line 5"]


def test_nothing_needs_python_3_10() -> None:
    """The interpreters nvhook supports start at 3.9 (Ubuntu 22.04 has 3.10, RHEL 9 3.9)."""
    found = {str(path.relative_to(REPO)): bad
             for path in (*product_modules().values(), *(REPO / "tests").rglob("*.py"))
             if (bad := _py39_breakers(ast.parse(path.read_text())))}
    assert not found


def _asserts(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for node in ast.walk(function):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in ("raises", "fail") or name.startswith(ASSERTING_HELPERS):
                return True
    return False


def test_every_test_asserts_something() -> None:
    silent = []
    for path in (REPO / "tests").rglob("test_*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and node.name.startswith("test_") and not _asserts(node)):
                silent.append(f"{path.relative_to(REPO)}::{node.name}")
    assert not silent
