"""Which adapter serves a target: a registry by URI scheme, so the seam (`base`) names no engine.

A second engine is a module beside `milvus` and one line here. The adapter is imported only when a
target of its scheme is opened, so a command that never opens a server never imports its client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from embedkit.remote.base import RemoteCollection, RemoteTarget

# URI scheme -> "module:class" of its adapter; the class has `connect(target) -> RemoteCollection`
ENGINES: dict[str, str] = {
    "milvus": "embedkit.remote.milvus:MilvusCollection",
}
LITE_SCHEME = "milvus"  # a local `.db` file is a Milvus Lite database


def scheme_of(target: RemoteTarget) -> str:
    return target.uri.split("://", 1)[0] if "://" in target.uri else LITE_SCHEME


def open_collection(target: RemoteTarget, *, create: bool = False) -> RemoteCollection:
    """The adapter for `target`'s engine, connected; an unreachable server is an `InputError`."""
    module_name, class_name = ENGINES[scheme_of(target)].split(":")
    adapter = getattr(importlib.import_module(module_name), class_name)
    return adapter.connect(target, create=create)
