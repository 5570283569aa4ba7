# syntax=docker/dockerfile:1
# The A2A Kafka Bridge image.
#
#   docker build -t ghcr.io/example/a2a-kafka-bridge:0.1.0 .
#   docker run --rm ghcr.io/example/a2a-kafka-bridge:0.1.0 --version
#
# Build stage: the bridge wheel, then a virtualenv with exactly the hashed
# runtime dependencies of requirements.lock (scripts/lock-runtime.py) and the
# wheel, no pip in it. Final stage: that virtualenv on a slim Python with pip
# removed, no compilers, a numeric non-root user, `bridge` as the entrypoint.
#
# Where no registry is reachable, `make image` (scripts/image.sh) builds this
# same file with podman on a stand-in base made from Debian's packages, given
# as PYTHON_IMAGE; tests/integration/test_image.py runs what it builds.
# Pin the base by digest for production: --build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:...
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_ROOT_USER_ACTION=ignore
ARG WHEELS=/wheels
ARG VENV=/opt/bridge
WORKDIR /src
# What the wheel is made of: the package, the schemas it validates against
# (force-included as bridge/_schemas), README.md, its long description, and
# LICENSE, which the wheel carries.
COPY pyproject.toml README.md LICENSE ./
COPY schemas ./schemas
COPY bridge ./bridge
RUN python -m pip wheel --no-deps --wheel-dir "$WHEELS" .
COPY requirements.lock ./
# The venv never gets pip: the build stage's pip installs into it (--python).
RUN python -m venv --without-pip "$VENV" \
    && python -m pip --python "$VENV/bin/python" install --require-hashes --no-deps --only-binary=:all: -r requirements.lock \
    && python -m pip --python "$VENV/bin/python" install --no-deps --no-index "$WHEELS"/*.whl

FROM ${PYTHON_IMAGE}
ARG VENV=/opt/bridge
# Nothing installs packages at run time: no pip (nor setuptools/wheel/ensurepip).
# Nothing outside /tmp is writable by the bridge's user, even without
# readOnlyRootFilesystem: Debian leaves /var/tmp and /run/lock world-writable.
RUN python -m pip uninstall --yes --quiet pip setuptools wheel \
    && rm -rf /usr/local/lib/python3.11/ensurepip /root/.cache \
    && find / -xdev -path /tmp -prune -o -perm -0002 ! -type l -exec chmod o-w {} +
COPY --from=build ${VENV} ${VENV}
ENV PATH=${VENV}/bin:${PATH} \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
LABEL org.opencontainers.image.title="a2a-kafka-bridge" \
      org.opencontainers.image.description="Drive A2A agent Tasks from Kafka commands and republish their events exactly once" \
      org.opencontainers.image.licenses="Apache-2.0"
# The same uid/gid as runAsUser/runAsGroup in deploy/base/deployment.yaml.
USER 10001:10001
# /metrics /healthz /readyz ([bridge] http_port)
EXPOSE 8080
ENTRYPOINT ["bridge"]
CMD ["--help"]
