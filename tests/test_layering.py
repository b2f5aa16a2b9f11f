"""The package layering: `icir_common` <- `icir_mcq` <- `vhs_adapter` <- `harness`, and no cycles.

Walks every import statement of the packages (module level and inside functions, with `ast`, so
lazy imports count too) and checks that (a) the neutral module imports none of the packages,
(b) the graph of top-level packages has no cycle, and (c) neither has the graph of the harness's
subpackages and modules (``harness.capture``, ``harness.lm_eval_plugin``, ``harness.analysis``...).
Also: no function of the eval path (document -> capture -> store -> analysis) is over 80 lines.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("icir_common", "icir_mcq", "vhs_adapter", "harness")


def _modules() -> dict[str, Path]:
    found = {"icir_common": ROOT / "icir_common.py"}
    for package in PACKAGES[1:]:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imports(module: str, path: Path) -> set[str]:
    names = set()
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parent + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in names if name.split(".")[0] in PACKAGES}


def _graph(unit) -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in modules.items():
        for imported in _imports(module, path):
            source, target = unit(module), unit(imported)
            if source and target and source != target:
                graph[source].add(target)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return trail + [node, nxt]
            if nxt not in state and (found := visit(nxt, trail + [node])):
                return found
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node, [])):
            return found
    return None


def test_the_walk_sees_the_imports():
    graph = _graph(lambda name: name.split(".")[0])
    assert {"icir_mcq", "vhs_adapter", "icir_common"} <= graph["harness"]
    assert "icir_common" in graph["icir_mcq"] and "icir_mcq" in graph["vhs_adapter"]
    assert _cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]


def test_the_neutral_module_imports_no_package():
    assert not _imports("icir_common", ROOT / "icir_common.py")


def test_no_cycle_between_packages():
    graph = _graph(lambda name: name.split(".")[0])
    assert _cycle(graph) is None
    assert "harness" not in graph["icir_mcq"] | graph["vhs_adapter"]
    assert "vhs_adapter" not in graph["icir_mcq"]


@pytest.mark.parametrize("package", ["harness", "icir_mcq", "vhs_adapter"])
def test_no_cycle_inside_a_package(package):
    """Subpackages and top-level modules of one package (``harness.capture``, ``harness.analysis``)."""

    def unit(name: str) -> str | None:
        parts = name.split(".")
        return ".".join(parts[:2]) if parts[0] == package and len(parts) > 1 else None

    assert _cycle(_graph(unit)) is None


EVAL_PATH = (
    "harness/capture", "harness/lm_eval_plugin", "harness/metrics", "harness/tasks", "harness/analysis.py",
    "harness/analyze.py", "harness/artifacts.py", "harness/evaluation.py", "harness/eval_cli.py",
    "harness/activation_store.py", "harness/constants.py", "icir_common.py",
)


def test_no_function_of_the_eval_path_is_over_80_lines():
    long = []
    for entry in EVAL_PATH:
        paths = [ROOT / entry] if entry.endswith(".py") else sorted((ROOT / entry).rglob("*.py"))
        for path in paths:
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 80:
                    long.append(f"{path.relative_to(ROOT)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)")
    assert not long


# Every place in the builders that reads a file, and why its path is safe: either a path the user
# named on the command line (a root itself), the package's own data, or a path that has been through
# `icir_common.inside_root`. A new read fails this test until it is reviewed and listed here.
REVIEWED_READS = {
    ("icir_mcq/coco_index.py", "read_coco_file"): "annotation file under the --coco root, by fixed name",
    ("icir_mcq/hub_folder.py", "render_card"): "the package's own card template",
    ("icir_mcq/images.py", "decode_image_file"): "the one image reader; its callers below pass checked paths",
    ("icir_mcq/images.py", "read_image_bytes"): "decode_image_file(inside_root(coco_root, relative, ...))",
    ("vhs_adapter/build.py", "_records"): "decode_image_file of resolve_image(...) paths, which are inside_root's",
    ("icir_mcq/mmniah.py", "load_contexts"): "the --mmniah files the user named",
    ("icir_mcq/validate.py", "digest"): "an inside_root(...) path",
    ("icir_mcq/validate.py", "_card_configs"): "the README.md of the folder the user named",
    ("icir_mcq/validate.py", "validate_icir_mcq"): "build_info.json of the folder the user named",
    ("vhs_adapter/question_files.py", "load_entries"): "a question file under the --vhs root",
}
READ_METHODS = {"read_bytes", "read_text", "open", "decode_image_file"}


def _reads(path: Path) -> set[tuple[str, str]]:
    found = set()
    tree = ast.parse(path.read_text())
    for function in ast.walk(tree):
        if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(function):
            if not isinstance(node, ast.Call):
                continue
            called = node.func
            name = called.attr if isinstance(called, ast.Attribute) else getattr(called, "id", None)
            from_bytes = any(isinstance(a, ast.Call) and getattr(a.func, "attr", None) == "BytesIO" for a in node.args)
            if name in READ_METHODS and not from_bytes:
                found.add((str(path.relative_to(ROOT)), function.name))
    return found


def test_every_read_in_the_builders_is_reviewed():
    reads = set()
    for package in ("icir_mcq", "vhs_adapter"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if "toy" not in path.parts and path.name != "toy_questions.py":  # the toy writers read their own output
                reads |= _reads(path)
    assert reads <= set(REVIEWED_READS), sorted(reads - set(REVIEWED_READS))
