# execserver: a Codex exec-server compatible executor, as a small container image.
#
#   docker build -t execserver .
#   install -m 0400 -o 10001 -g 10001 token ./token.execserver   # readable by the image's uid
#   docker run --rm -p 127.0.0.1:8765:8765 --read-only --tmpfs /tmp \
#     --cap-drop ALL --security-opt no-new-privileges \
#     --security-opt seccomp=deploy/seccomp/execserver.json \
#     --security-opt systempaths=unconfined \
#     -v "$PWD/token.execserver:/run/secrets/execserver/token:ro" \
#     -v "$PWD:/workspace" execserver
#   (podman: --security-opt 'unmask=/proc/*' instead of systempaths=unconfined)
#
# The default command listens on $EXECSERVER_LISTEN (all interfaces) and therefore
# REQUIRES a token at /run/secrets/execserver/token (Kubernetes: a Secret volume,
# see deploy/k8s). Change the port with -e EXECSERVER_LISTEN=ws://0.0.0.0:PORT (the
# HEALTHCHECK follows it), not with --listen.
# Sandboxing: bubblewrap needs unprivileged user namespaces, which Docker's and
# containerd's default seccomp profiles refuse; deploy/seccomp/execserver.json is
# that default plus what bubblewrap needs. It also mounts each sandbox a private
# /proc, which the kernel refuses while the runtime masks files in /proc: hence
# the unmasked /proc (safe for this non-root, capability-less container, see
# docs/deploying.md). `execserver doctor` tells what works.
#
# BASE_IMAGE: any Debian-based image with python3 >= 3.11 (and the venv module, or
# apt to install it). `make image` builds a local Debian one where no registry is
# reachable.

ARG BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS build
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# Debian's python3 needs python3-venv; python:*-slim images have the module already.
# hadolint ignore=DL3008
RUN python3 -c "import ensurepip, venv" 2>/dev/null \
    || { apt-get update \
         && apt-get install -y --no-install-recommends python3-venv \
         && rm -rf /var/lib/apt/lists/*; }
# pip's own settings pass through (e.g. PIP_CERT behind a TLS-inspecting proxy).
ARG PIP_CERT
ARG PIP_INDEX_URL
WORKDIR /src
COPY pyproject.toml README.md ./
# A virtualenv under /opt: works where the system pip is blocked (PEP 668) and is
# copied whole into the runtime stage (same base, same interpreter path). The
# dependencies (and the build backend) go in first, named by pyproject.toml alone,
# in a layer of their own: a change to the code then rebuilds only the layer below,
# the package itself (seconds), not every dependency downloaded and built again.
RUN python3 -m venv /opt/execserver \
    && python3 -c 'import tomllib; p = tomllib.load(open("pyproject.toml", "rb")); print("\n".join(p["project"]["dependencies"] + p["build-system"]["requires"]))' \
       > /tmp/requirements.txt \
    && /opt/execserver/bin/pip install --no-cache-dir -r /tmp/requirements.txt \
    && rm /tmp/requirements.txt
COPY execserver ./execserver
RUN /opt/execserver/bin/pip install --no-cache-dir --no-deps --no-build-isolation . \
    && /opt/execserver/bin/pip uninstall -y pip setuptools wheel \
    && /opt/execserver/bin/execserver --version

FROM ${BASE_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# bubblewrap: the primary sandbox backend; tini: forwards signals and reaps as PID 1.
# Distribution packages track the base image's release; pinning them would break
# the build on every security update.
# hadolint ignore=DL3008
RUN if ! command -v bwrap >/dev/null || ! command -v tini >/dev/null; then \
        apt-get update \
        && apt-get install -y --no-install-recommends bubblewrap tini ca-certificates \
        && rm -rf /var/lib/apt/lists/*; \
    fi
# A fixed non-root uid/gid so volume ownership and runAsUser can be set to match.
RUN groupadd --gid 10001 execserver \
    && useradd --uid 10001 --gid 10001 --create-home --home-dir /home/execserver \
       --shell /bin/bash execserver \
    && mkdir -p /workspace \
    && chown execserver:execserver /workspace
COPY --from=build /opt/execserver /opt/execserver

ENV PATH=/opt/execserver/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    EXECSERVER_LISTEN=ws://0.0.0.0:8765
USER 10001:10001
WORKDIR /workspace
EXPOSE 8765

# /readyz needs no token (and turns 503 while shutting down or draining); the port
# comes from EXECSERVER_LISTEN, the same variable the daemon listens on.
HEALTHCHECK --interval=10s --timeout=3s --start-period=10s --retries=3 \
    CMD ["python3", "-c", "import os, sys, urllib.parse, urllib.request; port = urllib.parse.urlsplit(os.environ['EXECSERVER_LISTEN']).port; sys.exit(urllib.request.urlopen(f'http://127.0.0.1:{port}/readyz', timeout=2).status != 200)"]

ENTRYPOINT ["tini", "--", "execserver", "serve"]
CMD ["--ws-auth", "capability-token", \
     "--ws-token-file", "/run/secrets/execserver/token", \
     "--log-format", "json", \
     "--metrics"]
