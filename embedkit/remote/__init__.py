"""Search beyond one machine: an index's documents and vectors in a search server.

`base` is the seam: a target (`RemoteTarget`, parsed from a URI), the record of what was pushed
(`PushRecord`), and the protocol an engine adapter implements (`RemoteCollection`: create,
upsert, read back, search dense and BM25). `milvus` is the one adapter so far (Milvus, or a
Milvus Lite `.db` file); a second engine is a module beside it and one line in
`engines.ENGINES`, the registry by URI scheme (the seam names no engine).
`push` sends an index folder (or `embed --shard` part files) to a target; `search` opens a target
as a `SearchIndex`, so dense, lexical and hybrid search, their fusions and `eval retrieval` are
the local code run against the server's candidate lists.
"""
