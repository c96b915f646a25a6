"""A Markdown file's YAML front matter, read with bounded work.

YAML's anchors and aliases let a few hundred bytes name billions of values (the "billion laughs"
document: nine lists of nine aliases to the list before). PyYAML's `safe_load` builds them as
shared references in an instant, but everything that walks the result afterwards (JSON for the
document store, the fields `--where` may name) walks every copy. So the front matter is bounded
before it is used:

- `MAX_BYTES` of YAML text;
- `MAX_DEPTH` lists and mappings inside each other (PyYAML composes recursively);
- `MAX_VALUES` values once every alias is expanded: counted on the composed node graph with each
  node's size computed once, so a billion-laughs document is refused after a few hundred steps.

Each is an `InputError` naming the file and the limit. The loader is PyYAML's `SafeLoader` (no
Python objects are built from tags), with these counts added, and one change: a field name is the
text written (`yes:`, `on:`, `~:` and `2024-01-31:` are the names "yes", "on", "~" and "2024-01-31";
YAML 1.1 would make the first two `True`, one field silently replacing the other). A name written
twice in one mapping, or a name that is not text (a list, a mapping), is an `InputError` naming
it. The values become JSON in `embedkit.data.values.json_metadata`.
"""

from __future__ import annotations

import re
from collections.abc import Hashable
from pathlib import Path
from typing import Any

from embedkit.errors import InputError

MAX_BYTES = 64 * 1024  # front matter is a few lines of `key: value`; 64 KiB is hundreds of them
MAX_DEPTH = 32  # lists and mappings inside each other
MAX_VALUES = 10_000  # values (scalars, lists, mappings) with aliases expanded


def split_front_matter(text: str, path: Path) -> tuple[dict[str, Any], str]:
    """A Markdown file's front matter as a mapping ({} without one) and the text after it.

    Front matter is YAML between a first line `---` and the next `---` (or `...`) line, as
    Jekyll, Hugo and Obsidian write it; a `---` with no closing line is a thematic break.
    """
    if not text.startswith("---\n"):
        return {}, text
    end = re.search(r"^(---|\.\.\.)[ \t]*$", text[4:], re.M)
    if end is None:
        return {}, text
    data = load_front_matter(text[4 : 4 + end.start()], path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise InputError(f"{path}: the front matter must be `key: value` lines, got a YAML {kind}")
    return data, text[4 + end.end() :].lstrip("\n")


def load_front_matter(yaml_text: str, path: Path) -> Any:
    """The YAML value of `yaml_text` (the lines between the `---` fences of `path`), bounded."""
    import yaml

    size = len(yaml_text.encode("utf-8", "surrogatepass"))
    if size > MAX_BYTES:
        raise InputError(
            f"{path}: the front matter has {size:,} bytes; it may have at most {MAX_BYTES:,} "
            "(move long values into the text)"
        )
    loader = _bounded_loader()(yaml_text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expanded_size(node, path)
        return loader.construct_document(node)
    except _FieldName as exc:
        raise InputError(f"{path}: the front matter {exc} (line {exc.line + 2})") from None
    except _TooDeep:
        raise InputError(
            f"{path}: the front matter nests lists and mappings over {MAX_DEPTH} deep; "
            f"it may nest at most {MAX_DEPTH}"
        ) from None
    except yaml.YAMLError as exc:
        # PyYAML's MarkedYAMLError has `problem_mark` (PyYAML 5 and 6); a bare YAMLError has none
        line = getattr(getattr(exc, "problem_mark", None), "line", None)
        where = f" (line {line + 2})" if line is not None else ""
        raise InputError(f"{path}: the front matter is not valid YAML{where}") from None
    finally:
        loader.dispose()


class _TooDeep(Exception):
    pass


class _FieldName(Exception):
    """A field name written twice in one mapping, or not text; `line`: 0-based in the YAML text."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(message)
        self.line = line


def _bounded_loader():  # -> a SafeLoader subclass counting how deep nodes are composed
    import yaml

    class BoundedLoader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent, index):
            self.depth += 1
            try:
                if self.depth > MAX_DEPTH:
                    raise _TooDeep
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_yaml_int(self, node):
            """A decimal integer through `number_from_text` (PyYAML's `int()` raises a ValueError
            past 4,300 digits); YAML's other forms (0x.., 0o.., 1_000, 1:30) as PyYAML reads them,
            their size checked with every stored value (`check_value`)."""
            from embedkit.data.values import number_from_text

            text = self.construct_scalar(node).replace("_", "")
            if re.fullmatch(r"[-+]?[1-9][0-9]*", text):
                return number_from_text(text)
            return super().construct_yaml_int(node)

        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
            """The mapping with each field name as written; YAML's merge keys (`<<`) as PyYAML
            merges them (the mapping's own names win over merged ones)."""
            own = [pair for pair in node.value if pair[0].tag != "tag:yaml.org,2002:merge"]
            self.flatten_mapping(node)
            merged = node.value[: len(node.value) - len(own)]
            mapping: dict[Hashable, Any] = {}
            for key_node, value_node in own:
                if not isinstance(key_node, yaml.ScalarNode):
                    raise _FieldName("has a field name that is a list or a mapping", key_node.start_mark.line)
                if key_node.value in mapping:
                    raise _FieldName(f"names the field {key_node.value!r} twice", key_node.start_mark.line)
                mapping[key_node.value] = self.construct_object(value_node, deep=deep)
            for key_node, value_node in merged:
                if isinstance(key_node, yaml.ScalarNode) and key_node.value not in mapping:
                    mapping[key_node.value] = self.construct_object(value_node, deep=deep)
            return mapping

    BoundedLoader.add_constructor("tag:yaml.org,2002:int", BoundedLoader.construct_yaml_int)
    return BoundedLoader


def _check_expanded_size(root: Any, path: Path) -> None:
    """An `InputError` when `root`'s node graph, every alias expanded, holds over `MAX_VALUES`
    values, or holds itself (an alias inside what its anchor names). Sizes are memoized per node,
    so shared (aliased) nodes cost one visit each; the walk is a loop, not recursion."""
    import yaml

    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # entered, children not yet sized: met again, the node holds itself
    stack: list[Any] = [root]
    while stack:
        node = stack[-1]
        if id(node) in sizes:
            stack.pop()
            continue
        if isinstance(node, yaml.ScalarNode):
            sizes[id(node)] = 1
            stack.pop()
            continue
        children = (
            [p for pair in node.value for p in pair] if isinstance(node, yaml.MappingNode) else node.value
        )
        if id(node) not in open_nodes:
            open_nodes.add(id(node))
            for child in children:
                if id(child) in open_nodes:
                    raise InputError(
                        f"{path}: the front matter holds itself (an alias inside its own anchor)"
                    )
                if id(child) not in sizes:
                    stack.append(child)
            continue
        stack.pop()
        open_nodes.discard(id(node))
        total = 1 + sum(sizes[id(child)] for child in children)
        if total > MAX_VALUES:
            raise InputError(
                f"{path}: the front matter expands to over {MAX_VALUES:,} values (YAML aliases repeat "
                f"what they name); it may hold at most {MAX_VALUES:,}"
            )
        sizes[id(node)] = total
