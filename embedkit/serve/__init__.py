"""`embedkit serve`: an HTTP embedding and search server with dynamic batching.

- `settings`: `ServeConfig` and the defaults (standard library only);
- `batching`: `DynamicBatcher`, concurrent requests' texts merged into token-budgeted batches;
- `engine`: the model, index and batcher of one server, without HTTP;
- `app`: the ASGI app (Starlette): OpenAI-compatible /v1/embeddings, /search, /health, /metrics;
- `metrics`: counters and histograms in Prometheus's text format;
- `schemas`: the request bodies, one definition for their checks and for `openapi` (/openapi.json);
- `tei`: text-embeddings-inference's /embed and /info; `page`: the search page, /docs, static files;
- `server`: uvicorn with a pre-bound socket and draining on SIGTERM/Ctrl-C.

Nothing is imported here, so that the CLI can read the defaults without loading the server.
"""
