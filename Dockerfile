# The janitor's image: the Python package and nothing else (the sandbox under devenv/ is for
# development and tests only). Manifests that run it arrive with the deployment work.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY janitor ./janitor
RUN pip install --no-cache-dir . && rm -rf /root/.cache
USER 65532:65532
ENTRYPOINT ["janitor"]
CMD ["--help"]
