"""What each module of the attribution package imports, read from its source (never imported): the third-party
modules and attribution's own modules, at the top and in functions alike (a function's `import httpx` runs when
the function does), leaving out what is guarded (a `try:` whose `except` catches ImportError, an
`if TYPE_CHECKING:`). `needs(module)` follows attribution's own imports to every third-party module a module can
end up importing.

The sources come as {path inside the package's parent: text}: a checkout's files or a wheel's (`from_wheel`);
the data the wheel carries (attribution/_data: the migrations, the incidents) is no part of the package's code.
"""

from __future__ import annotations

import ast
import sys
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

#: the standard library's top-level modules (the suite runs on 3.11+)
STDLIB = frozenset(sys.stdlib_module_names) | {"__future__"}


@dataclass(frozen=True)
class Imports:
    third_party: frozenset[str]  # top-level names
    own: frozenset[str]  # attribution modules


@dataclass
class Package:
    modules: dict[str, Imports] = field(default_factory=dict)

    @classmethod
    def from_sources(cls, sources: dict[str, str]) -> Package:
        names = {_module_name(p): p for p in sources if p.endswith(".py") and not p.startswith("attribution/_data/")}
        pkg = cls()
        for mod, path in sorted(names.items()):
            pkg.modules[mod] = _imports(mod, path.endswith("__init__.py"), sources[path], set(names))
        return pkg

    @classmethod
    def from_tree(cls, root: Path) -> Package:
        """The package under `root` (the folder that holds attribution/)."""
        return cls.from_sources({str(p.relative_to(root)): p.read_text() for p in (root / "attribution").rglob("*.py")})

    @classmethod
    def from_wheel(cls, wheel: Path) -> Package:
        with zipfile.ZipFile(wheel) as z:
            return cls.from_sources({n: z.read(n).decode() for n in z.namelist()
                                     if n.startswith("attribution/") and n.endswith(".py")})

    def needs(self, module: str) -> dict[str, str]:
        """Every third-party module `module` can import, directly or through attribution's own modules (and the
        packages that hold them), each with the attribution module that imports it."""
        out: dict[str, str] = {}
        seen: set[str] = set()
        todo = [module]
        while todo:
            m = todo.pop()
            if m in seen or m not in self.modules:
                continue
            seen.add(m)
            for tp in sorted(self.modules[m].third_party):
                out.setdefault(tp, m)
            parts = m.split(".")
            todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
            todo.extend(sorted(self.modules[m].own))
        return out


def _module_name(path: str) -> str:
    mod = path[:-3].replace("/", ".")
    return mod[: -len(".__init__")] if mod.endswith(".__init__") else mod


def _guarded(tree: ast.AST) -> set[int]:
    ids: set[int] = set()
    for node in ast.walk(tree):
        guarded_try = isinstance(node, ast.Try) and any(
            h.type is not None and any(n in ast.unparse(h.type) for n in ("ImportError", "ModuleNotFoundError"))
            for h in node.handlers)
        type_checking = isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        if guarded_try or type_checking:
            for stmt in node.body:
                ids.update(id(n) for n in ast.walk(stmt))
    return ids


def _imports(mod: str, is_package: bool, text: str, known: set[str]) -> Imports:
    tree = ast.parse(text)
    skip = _guarded(tree)
    here = mod if is_package else mod.rpartition(".")[0]
    third: set[str] = set()
    own: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top == "attribution":
                if name in known:
                    own.add(name)
            elif top and top not in STDLIB:
                third.add(top)
    return Imports(frozenset(third), frozenset(own))
