"""The configuration reference, rendered from the settings' own field docs.

``docs/configuration.md`` holds a table of every setting between two marker
comments; this module writes it from :class:`~evalfleet.core.settings.Settings`: the
environment variable (:meth:`Settings.environment_names`), the default, and the
docstring under the field. Run ``python -m evalfleet.docs`` after changing a
setting; ``python -m evalfleet.docs --check`` exits 1 when the file is out of date.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import itertools
import json
import re
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

from evalfleet.core.settings import Settings

#: The command that rewrites the table.
REGENERATE = "python -m evalfleet.docs"

BEGIN = f"<!-- settings table: generated from evalfleet/core/settings.py by `{REGENERATE}` -->"
END = "<!-- end of the generated settings table -->"

#: Modules whose classes carry no settings of ours (the bases of ``Settings``).
_LIBRARIES = frozenset({"builtins", "pydantic", "pydantic_settings", "typing"})

#: The configuration reference in a source tree.
CONFIGURATION_MD = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def field_docstrings(cls: type = Settings) -> dict[str, str]:
    """The docstring written under each annotated field of ``cls`` and its bases, by
    field name.

    Read from the source with :mod:`ast`: a string literal standing right after
    ``name: type [= default]`` in a class body documents ``name``; a subclass's
    docstring wins over its base's.
    """
    docs: dict[str, str] = {}
    for klass in reversed(cls.__mro__):
        if klass.__module__.partition(".")[0] in _LIBRARIES:
            continue
        tree = ast.parse(Path(inspect.getfile(klass)).read_text(encoding="utf-8"))
        body = next(node.body for node in ast.walk(tree)
                    if isinstance(node, ast.ClassDef) and node.name == klass.__name__)
        for node, following in itertools.pairwise(body):
            if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(following, ast.Expr)
                    and isinstance(following.value, ast.Constant)
                    and isinstance(following.value.value, str)):
                docs[node.target.id] = inspect.cleandoc(following.value.value)
    return docs


def settings_table(cls: type[Settings] = Settings) -> str:
    """The Markdown tables of every setting, one per settings group: variable, default,
    meaning.

    Raises:
        ValueError: A field has no docstring, or belongs to no group.
    """
    docs = field_docstrings(cls)
    undocumented = [name for name in cls.model_fields if name not in docs]
    if undocumented:
        raise ValueError(f"settings without a docstring under the field: {undocumented}")
    names = cls.environment_names()
    groups = [klass for klass in cls.__mro__ if issubclass(klass, BaseModel)
              and not issubclass(klass, BaseSettings) and klass is not BaseModel]
    ungrouped = set(names) - {name for group in groups for name in group.model_fields}
    if ungrouped:
        raise ValueError(f"settings in no group: {sorted(ungrouped)}")
    sections = []
    for group in groups:
        title = inspect.cleandoc(group.__doc__ or group.__name__).splitlines()[0].rstrip(".")
        rows = [f"### {_markdown(title, names)}", "",
                "| variable | default | meaning |", "|---|---|---|"]
        for name in group.model_fields:
            field = cls.model_fields[name]
            default = (field.default_factory() if field.default_factory is not None  # type: ignore[call-arg]
                       else field.default)
            meaning = _markdown(docs[name], names)
            rows.append(f"| `{names[name]}` | {_default(default)} | {meaning} |")
        sections.append("\n".join(rows) + "\n")
    return "\n".join(sections)


def render(document: str, cls: type[Settings] = Settings) -> str:
    """``document`` with the text between :data:`BEGIN` and :data:`END` replaced by the
    settings table.

    Raises:
        ValueError: The markers are missing, repeated or out of order.
    """
    start, end = document.find(BEGIN), document.find(END)
    if document.count(BEGIN) != 1 or document.count(END) != 1 or end < start:
        raise ValueError(f"expected {BEGIN!r} and then {END!r}, once each")
    return f"{document[:start]}{BEGIN}\n{settings_table(cls)}{document[end:]}"


def _default(value: Any) -> str:
    if value is None or value is PydanticUndefined:
        return "unset"
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, float) and value.is_integer():
        text = str(int(value))
    elif isinstance(value, dict | list | tuple):
        text = json.dumps(value)
    else:
        text = str(value)
    return f"`{text}`"


def _markdown(docstring: str, names: dict[str, str]) -> str:
    """One table cell: reST literals as Markdown code, a setting named by its field as
    its environment variable, on one line, pipes escaped."""
    text = " ".join(docstring.split())
    text = re.sub(r"``(.+?)``", lambda m: f"`{names.get(m[1], m[1])}`", text)
    return text.replace("|", "\\|")


def main(argv: list[str] | None = None) -> int:
    """Rewrite (or with ``--check``, verify) the settings table in configuration.md."""
    parser = argparse.ArgumentParser(prog=REGENERATE, description=__doc__.splitlines()[0])
    parser.add_argument("path", nargs="?", type=Path, default=CONFIGURATION_MD)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when the file is out of date instead of writing it")
    args = parser.parse_args(argv)
    current = args.path.read_text(encoding="utf-8")
    wanted = render(current)
    if args.check:
        if current != wanted:
            print(f"{args.path} is out of date with evalfleet/core/settings.py; run {REGENERATE}",
                  file=sys.stderr)
            return 1
        return 0
    if current != wanted:
        args.path.write_text(wanted, encoding="utf-8")
        print(f"rewrote the settings table in {args.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
