"""Search over an index's data: the seam under it, the pipeline above it.

`store` is the seam: what a search needs from where the data lives (`SearchStore`), implemented
by an index folder (`embedkit.index.local_store`), a pushed collection (`embedkit.remote.search`)
and a corpus held in memory for evaluation (`embedkit.evaluation.memory_store`). `pipeline` is the
one search: dense, lexical, fusion (`fusion`), prf, passages to documents, filters, and the place
where a re-ranker plugs in (`rerank`: a cross-encoder's). `request` owns the search modes and the
index's defaults; `hits` the results and their JSON. Nothing here reads an index folder:
`embedkit.index.search.SearchIndex` opens one.
"""
