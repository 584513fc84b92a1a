"""One writer: no module of the package but `mlbaseline/safewrite.py` writes a file itself.

Read from the AST of every module: `open(…, "w"/"a"/"x"/"+")` (and `Path.open`, `os.fdopen`),
`.write_text(`, `.write_bytes(`, `os.open` with write flags, `shutil.copy*`, `os.replace` /
`os.rename`, and `savefig` / `torch.save` / `np.save` / PIL's `.save(…, format=…)` / `csv.writer`
on anything but a file object the writer handed out (`with open_output(…) as fh`,
`x = open_stream(…)`) or an in-memory buffer. The allow-list names, with its reason, what is not
an output file.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "mlbaseline"
WRITER = "safewrite.py"

# (file relative to the package, function) → why it may write without the writer
ALLOWED = {
    ("measure/memory.py", "RssMeter.reset"): "/proc/self/clear_refs is a kernel control "
    "file (resets VmHWM), not an output",
    ("measure/memory_step.py", "ProcSelf._open"): "/proc/self/clear_refs again, for the "
    "per-step VmHWM reset: a kernel control file, not an output",
    ("subset/output.py", "place_file"): "copies or links a dataset file into the private 0700 "
    "folder mkdtemp made for the partial subset; the folder moves into place as a whole",
    ("subset/output.py", "PartialDir.commit"): "renames whole folders (the finished subset, the "
    "replaced one), not files",
    ("folderlock.py", "_open"): "the output folder's lock file: opened in place (a rename "
    "would lose the lock) after safewrite.check_in_place refused a link or node there",
    ("cli/streams.py", "silence"): "opens /dev/null to put under stdout/stderr once their "
    "reader has gone (`mlb … | head`): writes nothing anywhere, not an output",
}

_WRITE_MODE = re.compile(r"^[rwaxbt+]*[wax+][rwaxbt+]*$")
_WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_TRUNC", "O_APPEND"}
# calls that hand out a file object it is fine to write into
_HANDLES = {"open_output", "open_stream", "StringIO", "BytesIO"}


def _name(func: ast.expr) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _dotted(func: ast.expr) -> str:
    return ast.unparse(func)


def _handles(tree: ast.AST) -> set[str]:
    """The expressions (as source) bound to a file object from the writer or a buffer."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.With | ast.AsyncWith):
            for item in node.items:
                call = item.context_expr
                var = item.optional_vars
                if isinstance(call, ast.Call) and _name(call.func) in _HANDLES and var is not None:
                    found.add(ast.unparse(var))
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            found |= {ast.unparse(t) for t in node.targets if _name(node.value.func) in _HANDLES}
    return found


def _mode_args(call: ast.Call) -> list[ast.expr]:
    return [*call.args, *(k.value for k in call.keywords if k.arg == "mode")]


def _is_write_mode(call: ast.Call) -> bool:
    return any(
        isinstance(a, ast.Constant) and isinstance(a.value, str) and _WRITE_MODE.match(a.value)
        for a in _mode_args(call)
    )


def _target_arg(call: ast.Call, name: str, dotted: str) -> ast.expr | None:
    """The argument that names where a save-like call writes, or None if it is not one."""
    if name == "savefig" or dotted.startswith(("np.save", "numpy.save")):
        return call.args[0] if call.args else None
    if dotted == "torch.save":
        return call.args[1] if len(call.args) > 1 else None
    if dotted in ("csv.writer", "csv.DictWriter"):
        return call.args[0] if call.args else None
    if name == "save" and any(k.arg == "format" for k in call.keywords):  # PIL
        return call.args[0] if call.args else None
    return None


def _violation(call: ast.Call, handles: set[str]) -> str | None:
    name, dotted = _name(call.func), _dotted(call.func)
    if name in ("open", "fdopen") and dotted != "os.open" and _is_write_mode(call):
        return f"{dotted}(…, write mode)"
    # a method (Path.write_text); the writer's own functions of that name are called bare
    method = isinstance(call.func, ast.Attribute) and dotted != f"safewrite.{name}"
    if name in ("write_text", "write_bytes") and method:
        return f".{name}("
    if dotted == "os.open":
        flags = {getattr(n, "attr", "") for n in ast.walk(call.args[1])} if call.args[1:] else set()
        if flags & _WRITE_FLAGS:
            return "os.open(…, write flags)"
    if dotted.startswith("shutil.copy") or dotted in ("os.replace", "os.rename"):
        return f"{dotted}("
    target = _target_arg(call, name, dotted)
    if target is not None and ast.unparse(target) not in handles:
        return f"{dotted}({ast.unparse(target)}) not on a file from the writer"
    return None


def violations(source: str, filename: str = "<src>") -> list[tuple[str, int, str]]:
    """(enclosing function, line, what) of every write outside the writer in `source`."""
    tree = ast.parse(source, filename=filename)
    handles = _handles(tree)
    found: list[tuple[str, int, str]] = []

    def visit(node: ast.AST, scope: list[str]) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                inner = [*scope, child.name]
            if isinstance(child, ast.Call):
                what = _violation(child, handles)
                if what is not None:
                    found.append((".".join(scope), child.lineno, what))
            visit(child, inner)

    visit(tree, [])
    return found


def test_no_module_writes_outside_the_writer():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == WRITER:
            continue
        for scope, line, what in violations(path.read_text(encoding="utf-8"), rel):
            if (rel, scope) not in ALLOWED:
                bad.append(f"mlbaseline/{rel}:{line} ({scope or 'module'}): {what}")
    assert bad == [], "write through mlbaseline.safewrite instead:\n" + "\n".join(bad)


def test_the_allow_list_is_still_needed():
    """An allow-list entry that no longer writes anything is stale: remove it."""
    used = set()
    for rel, scope in ALLOWED:
        src = (PACKAGE / rel).read_text(encoding="utf-8")
        used |= {(rel, s) for s, _, _ in violations(src, rel) if s == scope}
    assert used == set(ALLOWED)


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("open(p, 'w')", id="open-w"),
        pytest.param("open(p, mode='ab')", id="open-append"),
        pytest.param("open(p, 'r+')", id="open-update"),
        pytest.param("Path(p).open('x')", id="path-open-x"),
        pytest.param("os.fdopen(fd, 'wb')", id="fdopen"),
        pytest.param("p.write_text('x')", id="write-text"),
        pytest.param("p.write_bytes(b'x')", id="write-bytes"),
        pytest.param("self.path.write_text('x')", id="write-text-attribute"),
        pytest.param("os.open(p, os.O_WRONLY | os.O_CREAT)", id="os-open"),
        pytest.param("fig.savefig(p, format='png')", id="savefig-path"),
        pytest.param("torch.save(obj, p)", id="torch-save"),
        pytest.param("Image.fromarray(a).save(p, format='PNG')", id="pil-save"),
        pytest.param("fh = open(p)\ncsv.writer(fh)", id="csv-on-a-plain-file"),
        pytest.param("shutil.copyfile(a, b)", id="copyfile"),
        pytest.param("os.replace(a, b)", id="replace"),
    ],
)
def test_the_check_finds_each_kind_of_write(source):
    assert len(violations(source)) == 1


@pytest.mark.parametrize(
    "source",
    [
        pytest.param("open(p)", id="read"),
        pytest.param("open(p, 'rb')", id="read-binary"),
        pytest.param("os.open(p, os.O_RDONLY | os.O_NONBLOCK)", id="os-open-read"),
        pytest.param("with open_output(p, mode='wb') as fh:\n    fig.savefig(fh)", id="savefig"),
        pytest.param("with open_output(p, mode='wb') as fh:\n    torch.save(x, fh)", id="torch"),
        pytest.param("self._fh = open_stream(p)\ncsv.DictWriter(self._fh, [])", id="stream"),
        pytest.param("buf = io.StringIO()\ncsv.writer(buf)", id="buffer"),
        pytest.param("write_text(p, 'x', force=True)", id="the-writer"),
        pytest.param("safewrite.write_bytes(p, b'x')", id="the-writer-module"),
    ],
)
def test_the_check_lets_reads_and_the_writers_files_pass(source):
    assert violations(source) == []
