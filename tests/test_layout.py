"""The package is layered (pyproject's [tool.importlinter]): no module imports from a layer above it, the systems never
import each other, the model file imports nothing of the package, and no modules import each other in a circle."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_no_layer_imports_from_a_layer_above_it():
    result = subprocess.run([str(Path(sys.executable).with_name("lint-imports"))], cwd=ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 2 kept, 0 broken." in result.stdout


def package_imports(package: Path) -> dict[str, set[str]]:
    """Each module of the package and the package's modules it imports anywhere in it (in functions too, and under
    TYPE_CHECKING: a circle there is still a circle to a reader)."""
    modules = {".".join(path.relative_to(package.parent).with_suffix("").parts).removesuffix(".__init__"): path
               for path in package.rglob("*.py")}
    imports = {}
    for name, path in modules.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                found |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
            elif isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
        imports[name] = {module for module in found if module in modules and module != name}
    return imports


def circles(imports: dict[str, set[str]]) -> list[list[str]]:
    """The import circles: every module that can reach itself, with the path back (depth first)."""
    found = []

    def walk(start: str, module: str, path: list[str], seen: set[str]) -> None:
        for imported in sorted(imports[module]):
            if imported == start:
                found.append([*path, start])
            elif imported not in seen:
                seen.add(imported)
                walk(start, imported, [*path, imported], seen)

    for module in sorted(imports):
        walk(module, module, [module], {module})
    return found


def test_no_modules_import_each_other_in_a_circle():
    assert circles(package_imports(ROOT / "src/twoscale")) == []


def test_the_circle_check_finds_each_module_of_a_circle_and_none_outside_it():
    imports = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(imports) == [["a", "b", "c", "a"], ["b", "c", "a", "b"], ["c", "a", "b", "c"]]
