# The remat service image: one image, two roles.
#   docker run -p 8000:8000 -e REMAT_TOKENS=$(openssl rand -hex 24) remat    # `remat serve`, embedded (SQLite in /data)
#   docker run remat serve --queue redis://:PASSWORD@redis:6379/0             # an API replica in cluster mode
#   docker run remat worker --queue redis://:PASSWORD@redis:6379/0
# It listens on every address, so `remat serve` refuses to start without REMAT_TOKENS (or REMAT_INSECURE=1).
# torch is not in the image: the service receives graphs, it never captures models.
# Base images are pinned by digest (python 3.11.16, Debian bookworm); dependencies by requirements.lock,
# with their hashes (regenerate: pip-compile --generate-hashes --strip-extras --allow-unsafe -o requirements.lock).

FROM python:3.11.16-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY requirements.lock ./
RUN pip install --require-hashes --no-deps -r requirements.lock
COPY pyproject.toml README.md ./
COPY src ./src
RUN pip install --no-deps . && pip check && python -c "import remat.service, remat.solvers"

FROM python:3.11.16-slim-bookworm@sha256:a36c24f9cbdf4fd0f52d67f0823eeac19c2028c637cecc392d97f980d4fec56b
# tini is PID 1: it forwards SIGTERM to remat and reaps orphans; remat stops its own solver groups.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends tini \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --user-group --create-home --home-dir /home/remat remat \
    && mkdir /data \
    && chown 10001:10001 /data
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    REMAT_HOST=0.0.0.0 \
    REMAT_DATA_DIR=/data \
    REMAT_HEARTBEAT_FILE=/tmp/remat-heartbeat
USER 10001:10001
WORKDIR /home/remat
VOLUME ["/data"]
EXPOSE 8000
# Both roles touch the heartbeat file on every maintenance pass (about every 7 s).
HEALTHCHECK --interval=30s --timeout=10s --start-period=60s --retries=3 CMD ["remat", "healthcheck"]
ENTRYPOINT ["tini", "--", "remat"]
CMD ["serve"]
