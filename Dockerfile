# embedkit serve on the CPU: the OpenAI-compatible /v1/embeddings, /search, /health and /metrics.
#
#   docker build -t embedkit .
#   docker run --rm -p 8000:8000 embedkit                                   # the bundled all-MiniLM-L6-v2
#   docker run --rm -p 8000:8000 -v "$PWD/models:/data/models:ro" embedkit /data/models/mine-onnx
#   docker run --rm -p 8000:8000 -v "$PWD:/data" -e EMBEDKIT_API_KEY=secret embedkit --index /data/my-index
#
# An index records its model's path and, beside it, the same path relative to the index: built in
# $PWD with a model under $PWD (or the bundled model), `--index /data/my-index` finds its model
# inside the volume (tests/index/test_model_location.py runs these paths outside docker).
#
# Arguments after the image name go to `embedkit serve` (model folder, --index, --api-key, ...).
# Models and indexes live in the volume /data (the working directory). The server listens on
# 0.0.0.0:8000 inside the container; set EMBEDKIT_API_KEY when the port is reachable from elsewhere.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1

# torch first, from the CPU wheel index: without it pip would pull the multi-GB CUDA build.
# Its own layer, so that a change to embedkit does not download torch again.
RUN pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

# A plain (non-editable) install of the versions the tests passed with (constraints.txt);
# .dockerignore keeps tests, data and build outputs out.
COPY . /opt/embedkit/src
RUN pip install -c /opt/embedkit/src/constraints.txt "/opt/embedkit/src[cpu,serve]" \
    && rm -rf /opt/embedkit/src

# Run as a user of its own (numeric, so that Kubernetes' runAsNonRoot can check it), owning only
# the data volume.
RUN groupadd --gid 10001 embedkit \
    && useradd --create-home --uid 10001 --gid 10001 embedkit \
    && mkdir /data \
    && chown 10001:10001 /data
USER 10001:10001
WORKDIR /data
VOLUME ["/data"]

EXPOSE 8000
# /health answers 200 once the model has answered a first batch, 503 while it loads;
# urlopen raises on anything but a 2xx, so the check fails until then.
HEALTHCHECK --interval=30s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=4)"]

# SIGTERM (docker stop) lets the server finish the requests in flight, then exit 0.
ENTRYPOINT ["embedkit", "serve", "--host", "0.0.0.0", "--port", "8000"]
CMD []
