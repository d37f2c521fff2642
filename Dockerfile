# syntax=docker/dockerfile:1
# One image for the janitor (`janitor run`) and the node agent (`janitor node-agent`): the janitor
# package and its runtime dependencies at the versions in requirements.lock, nothing else (no
# tests, no devenv/, no test extra). Manifests: manifests/base (docs/admin-guide.md).
#
#   docker build -t registry.example.com/kube-idle-janitor:0.1.0 .
#
# For a reproducible base, pin its digest:
#   --build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:<digest>
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
RUN python -m venv /opt/janitor
# Dependencies first (their layer survives code changes), exactly as locked; `pip check` below
# proves the lock is complete.
COPY requirements.lock /tmp/requirements.lock
RUN /opt/janitor/bin/pip install --no-deps -r /tmp/requirements.lock
# The build backend, pinned, instead of whatever is newest in an isolated build environment.
RUN /opt/janitor/bin/pip install setuptools==80.9.0
WORKDIR /src
COPY pyproject.toml README.md ./
COPY janitor ./janitor
RUN /opt/janitor/bin/pip install --no-deps --no-build-isolation . \
    && /opt/janitor/bin/pip uninstall -y setuptools \
    && /opt/janitor/bin/pip check \
    && /opt/janitor/bin/janitor --version

FROM ${PYTHON_IMAGE}
COPY --from=build /opt/janitor /opt/janitor
# Read-only root filesystem in the manifests: no .pyc writes; logs unbuffered.
ENV PATH=/opt/janitor/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# The janitor runs as this user (manifests set runAsUser 65532 too); the node agent's DaemonSet
# runs it as root with two capabilities to read every process's /proc.
USER 65532:65532
ENTRYPOINT ["janitor"]
CMD ["--help"]
