# execserver: a Codex exec-server compatible executor, as a small container image.
#
#   docker build -t execserver .
#   docker run --rm -p 8765:8765 \
#     -v "$PWD/token:/run/secrets/execserver/token:ro" -v "$PWD:/workspace" execserver
#
# The default command listens on all interfaces and therefore REQUIRES a token:
# mount it at /run/secrets/execserver/token (Kubernetes: a Secret volume, see deploy/k8s).
# Sandboxing: bubblewrap needs unprivileged user namespaces, which Docker's default
# seccomp profile blocks; without them the daemon falls back to Landlock + seccomp,
# and refuses (fails closed) what that cannot enforce. `execserver doctor` tells which.

ARG PYTHON_VERSION=3.11

FROM python:${PYTHON_VERSION}-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY execserver ./execserver
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM python:${PYTHON_VERSION}-slim
# bubblewrap: the primary sandbox backend; tini: forwards signals and reaps as PID 1.
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap tini ca-certificates \
    && rm -rf /var/lib/apt/lists/*
# A fixed non-root uid/gid so volume ownership and runAsUser can be set to match.
RUN groupadd --gid 10001 execserver \
    && useradd --uid 10001 --gid 10001 --create-home --home-dir /home/execserver \
       --shell /bin/bash execserver \
    && mkdir -p /workspace \
    && chown execserver:execserver /workspace
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
WORKDIR /workspace
EXPOSE 8765

# /readyz needs no token (and turns 503 while shutting down); urllib sends no Origin header.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8765/readyz', timeout=2).status != 200)"]

ENTRYPOINT ["tini", "--", "execserver", "serve"]
CMD ["--listen", "ws://0.0.0.0:8765", \
     "--ws-auth", "capability-token", \
     "--ws-token-file", "/run/secrets/execserver/token", \
     "--log-format", "json", \
     "--metrics"]
