# syntax=docker/dockerfile:1
# One image for the janitor (`janitor run`) and the node agent (`janitor node-agent`): the janitor
# package and its runtime dependencies at the versions in requirements.lock, nothing else (no
# tests, no devenv/, no test extra, no pip). Manifests: manifests/base or charts/ (docs/admin-guide.md).
#
#   docker build --build-arg VERSION=0.1.0 --build-arg REVISION=$(git rev-parse HEAD) \
#     -t registry.example.com/kube-idle-janitor:0.1.0 .
#
# VERSION is the janitor's version (the git tag without its v; the build context has no .git).
# For a reproducible base, pin its digest:
#   --build-arg PYTHON_IMAGE=python:3.11-slim-bookworm@sha256:<digest>
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG VERSION=0.0.0+unknown
WORKDIR /src
COPY requirements.lock pyproject.toml README.md LICENSE ./
COPY packaging ./packaging
COPY janitor ./janitor
# The same script the tests run (tests/unit/test_packaging.py): a venv with the lock and the
# janitor, no pip in it, every module imported once as the check.
RUN SETUPTOOLS_SCM_PRETEND_VERSION=${VERSION} sh packaging/runtime-venv.sh /opt/janitor python3

FROM ${PYTHON_IMAGE}
ARG VERSION=0.0.0+unknown
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="kube-idle-janitor" \
      org.opencontainers.image.description="Reclaims idle GPUs, long-Pending and stuck pods, and expired objects on shared Kubernetes clusters" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.source="https://github.com/kube-idle-janitor/kube-idle-janitor" \
      org.opencontainers.image.documentation="https://github.com/kube-idle-janitor/kube-idle-janitor/blob/main/docs/admin-guide.md"
# The base image's own pip and setuptools: nothing at run time installs anything.
RUN rm -rf /usr/local/lib/python3.11/site-packages/pip* /usr/local/lib/python3.11/site-packages/setuptools* \
           /usr/local/bin/pip*
COPY --from=build /opt/janitor /opt/janitor
COPY LICENSE /licenses/LICENSE
# Read-only root filesystem in the manifests: no .pyc writes; logs unbuffered.
ENV PATH=/opt/janitor/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# The janitor runs as this user (manifests set runAsUser 65532 too); the node agent's DaemonSet
# runs it as root with two capabilities to read every process's /proc.
USER 65532:65532
ENTRYPOINT ["janitor"]
CMD ["--help"]
