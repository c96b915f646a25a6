"""Which adapter serves a target: a registry by URI scheme, so the seam (`base`) names no engine.

A second engine is a module beside `milvus` and one line here. The adapter is imported only when a
target of its scheme is opened (`base.open_collection`), so a command that never opens a server
never imports its client. This module holds only the registry: it imports nothing of the seam.
"""

from __future__ import annotations

# URI scheme -> "module:class" of its adapter; the class has `connect(target) -> RemoteCollection`
ENGINES: dict[str, str] = {
    "milvus": "embedkit.remote.milvus:MilvusCollection",
}
LITE_SCHEME = "milvus"  # a local `.db` file is a Milvus Lite database
