"""The requirement DSL of NVIDIA_REQUIRE_* / `--require` (libnvc-spec §6.1). Pure.

An expression is OR-terms separated by spaces, each a comma-separated AND of atoms
`key op value`: `"cuda>=12.4 brand=tesla,driver>=470,driver<471"` holds when cuda >= 12.4, or
when the GPU is a Tesla with a 470 driver. Keys: cuda, driver, arch (versions, compared
numerically per dot component) and brand (case-insensitive; only = and !=). Operators:
= != < <= > >=, and, as in libnvc, a lone `!` means `!=`. Malformed expressions are errors,
never "unsatisfied". Facts that are unknown (no GPU selected, no CUDA version) count as met.
"""

from __future__ import annotations

from nvmount.bounds import MAX_DIGITS, compare_decimal, shorten
from nvmount.errors import RequirementError
from nvmount.records import record, replace

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs the hook ~2 ms
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from nvmount.discover.inventory import DriverInventory
    from nvmount.plan.selection import Selection

OPERATORS: tuple[str, ...] = ("=", "!=", "<", "<=", ">", ">=")  # libnvc's match order
KEYS: tuple[str, ...] = ("cuda", "driver", "arch", "brand")
# Budgets (a CUDA 12 image's NVIDIA_REQUIRE_CUDA has ~120 atoms in ~1.5 KB): the checks cost
# at most MAX_ATOMS x the distinct fact sets (GPU models), never x every device.
MAX_REQUIREMENTS = 32
MAX_REQUIREMENT_CHARS = 8192  # one expression
MAX_ATOMS = 512  # in one expression
MAX_TOTAL_ATOMS = 2048  # in all expressions together
_OP_CHARS = "<>=!"
_VERSION_CHARS = "0123456789."  # a version is digits and dots (no `re`: ~4 ms per start)
_CUDA_HINT = "please update your driver to a newer version, or use an earlier cuda container"


@record
class Atom:
    """One condition of a requirement, such as `cuda>=12.4`."""

    key: str  # lowercase key
    op: str  # one of OPERATORS
    value: str
    text: str  # the atom as written


@record
class Requirement:
    """A parsed NVIDIA_REQUIRE_* expression."""

    text: str  # the whole expression as written
    terms: tuple[tuple[Atom, ...], ...]  # OR of ANDs; () always holds


@record
class Facts:
    """What a requirement is checked against; "" means unknown (and any condition on it holds)."""

    cuda: str = ""  # "12.4"
    driver: str = ""  # "550.54.15"
    arch: str = ""  # "8.0" of the GPU (the parent GPU for a MIG device)
    brand: str = ""  # "Tesla"
    device: str = ""  # "GPU 0 (GPU-...)" in messages


def _invalid(expr: str, atom: str, why: str) -> RequirementError:
    return RequirementError(
        f"requirement error: invalid expression {shorten(expr)!r}: {shorten(atom)!r}: {why} "
        f"(write key op value with key in {', '.join(KEYS)} and op in {' '.join(OPERATORS)})")


def _match_op(run: str) -> str | None:
    """libnvc compares the operator run with strncmp(run, op, len(run)): "!" matches "!="."""
    return next((op for op in OPERATORS if op.startswith(run)), None)


def _parse_atom(expr: str, text: str) -> Atom:
    start = next((i for i, c in enumerate(text) if c in _OP_CHARS), -1)
    if start <= 0:
        raise _invalid(expr, text, "missing key" if start == 0 else "missing operator")
    end = start
    while end < len(text) and text[end] in _OP_CHARS:
        end += 1
    key, run, value = text[:start].lower(), text[start:end], text[end:]
    op = _match_op(run)
    if op is None:
        raise _invalid(expr, text, f"unknown operator {shorten(run)!r}")
    if not value:
        raise _invalid(expr, text, "missing value")
    if key not in KEYS:
        raise _invalid(expr, text, f"unknown key {shorten(key)!r}")
    if key == "brand" and op not in ("=", "!="):
        raise _invalid(expr, text, f"brand only supports = and !=, not {op!r}")
    if key != "brand" and value.strip(_VERSION_CHARS):
        raise _invalid(expr, text, f"{key} wants a version made of digits and dots")
    if key != "brand" and any(len(part) > MAX_DIGITS for part in value.split(".")):
        raise _invalid(expr, text, f"a version component has more than {MAX_DIGITS} digits")
    return Atom(key, op, value, text)


def parse_requirement(expr: str) -> Requirement:
    """Parse one expression; raises `RequirementError` naming the expression and the atom
    (or the budget: `MAX_REQUIREMENT_CHARS` characters, `MAX_ATOMS` atoms)."""
    if len(expr) > MAX_REQUIREMENT_CHARS:
        raise RequirementError(
            f"requirement error: expression {shorten(expr)!r} is longer than "
            f"{MAX_REQUIREMENT_CHARS} characters (shorten the NVIDIA_REQUIRE_* value)")
    if count_atoms(expr) > MAX_ATOMS:
        raise RequirementError(
            f"requirement error: expression {shorten(expr)!r} has {count_atoms(expr)} "
            f"conditions, more than {MAX_ATOMS} (shorten the NVIDIA_REQUIRE_* value)")
    terms = []
    for term in expr.split(" "):
        atoms = tuple(_parse_atom(expr, a) for a in term.split(",") if a)
        if atoms or term:
            terms.append(atoms)
    return Requirement(expr, tuple(terms))


def count_atoms(expr: str) -> int:
    """How many atoms an expression has (the non-empty pieces between spaces and commas)."""
    return sum(1 for term in expr.split(" ") for atom in term.split(",") if atom)


def compare_versions(a: str, b: str) -> int:
    """-1/0/1, numerically per dot component; missing trailing components count as 0.
    Components are compared as digit strings (`compare_decimal`), never converted."""
    pa, pb = a.split("."), b.split(".")
    width = max(len(pa), len(pb))
    pa += [""] * (width - len(pa))
    pb += [""] * (width - len(pb))
    for x, y in zip(pa, pb):  # padded to one length above (3.9 has no strict=)
        c = compare_decimal(x, y)
        if c:
            return c
    return 0


_TESTS: dict[str, Callable[[int], bool]] = {
    "=": lambda c: c == 0, "!=": lambda c: c != 0, "<": lambda c: c < 0,
    "<=": lambda c: c <= 0, ">": lambda c: c > 0, ">=": lambda c: c >= 0,
}


def _fact(facts: Facts, key: str) -> str:
    return str(getattr(facts, key))


def atom_holds(atom: Atom, facts: Facts, expr: str = "") -> bool:
    found = _fact(facts, atom.key)
    if not found:
        return True
    if atom.key == "brand":
        return (found.lower() == atom.value.lower()) == (atom.op == "=")
    if found.strip(_VERSION_CHARS):
        raise _invalid(expr or atom.text, atom.text, f"the {atom.key} version {shorten(found)!r} "
                       f"is not made of digits and dots")
    return _TESTS[atom.op](compare_versions(found, atom.value))


def _first_false(req: Requirement, facts: Facts) -> list[Atom] | None:
    """None when the requirement holds, else the first false atom of each OR-term."""
    failed: list[Atom] = []
    previous = True  # libnvc: a term of commas only keeps the previous term's result
    for atoms in req.terms:
        bad = next((a for a in atoms if not atom_holds(a, facts, req.text)), None)
        ok = previous if not atoms else bad is None
        if ok:
            return None
        if bad is not None:
            failed.append(bad)
        previous = ok
    return failed if req.terms else None


def _describe(atom: Atom, facts: Facts) -> str:
    found = _fact(facts, atom.key)
    what = {
        "cuda": f"the driver supports CUDA {found}",
        "driver": f"the driver version is {found}",
        "arch": f"{facts.device or 'the GPU'} has compute capability {found}",
        "brand": f"{facts.device or 'the GPU'} has brand {found}",
    }[atom.key]
    return what


def check_requirement(req: Requirement, facts: Facts) -> None:
    """Raise `RequirementError` naming the requirement and the values found when it fails."""
    failed = _first_false(req, facts)
    if failed is None:
        return
    if len(failed) == 1:
        cause = _describe(failed[0], facts)
    else:
        cause = "; ".join(f"{a.text}: {_describe(a, facts)}" for a in failed)
    msg = f"requirement {shorten(req.text, 400)} not met: {cause}"
    if req.text.split(" ", 1)[0].startswith("cuda>="):
        msg += f" ({_CUDA_HINT})"
    raise RequirementError(msg)


def check_requirements(expressions: Sequence[str], facts: Sequence[Facts]) -> None:
    """Check every expression against every fact set (one per selected GPU or MIG device;
    one device-less set when nothing is selected). All must hold. Parse errors and budgets
    come first. Fact sets that differ only in the device's name are checked once (the first
    one names the device in an error): 64 identical GPUs cost what one does."""
    if len(expressions) > MAX_REQUIREMENTS:
        raise RequirementError(
            f"requirement error: too many requirements ({len(expressions)}, at most "
            f"{MAX_REQUIREMENTS}) (set fewer NVIDIA_REQUIRE_* variables)")
    total = sum(count_atoms(e) for e in expressions)
    if total > MAX_TOTAL_ATOMS:
        raise RequirementError(
            f"requirement error: {total} conditions in all, more than {MAX_TOTAL_ATOMS} "
            "(shorten the NVIDIA_REQUIRE_* values)")
    parsed = [parse_requirement(e) for e in expressions]
    distinct: dict[Facts, Facts] = {}
    for f in facts:
        distinct.setdefault(replace(f, device=""), f)
    for req in parsed:
        for f in distinct.values():
            check_requirement(req, f)


def requirement_facts(inventory: DriverInventory, selection: Selection) -> tuple[Facts, ...]:
    """One fact set per selected GPU and per selected MIG device (with its parent's arch and
    brand), or a single device-less set when nothing is selected."""
    base = Facts(cuda=inventory.cuda_version, driver=inventory.driver_version)
    facts = [
        replace(base, arch=g.architecture, brand=g.brand, device=f"GPU {g.index} ({g.uuid})")
        for g in selection.gpus
    ]
    parents = {g.index: g for g in reversed(selection.gpus)}  # the first wins, as parent_of
    for mig in selection.mig_devices:
        parent = parents.get(mig.gpu_index) or selection.parent_of(mig)
        facts.append(replace(base, arch=parent.architecture, brand=parent.brand,
                             device=f"MIG device {parent.index}:{mig.index} ({mig.uuid})"))
    return tuple(facts) or (base,)
