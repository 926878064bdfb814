# The remat service image: one image, two roles.
#   docker run -p 8000:8000 remat                      # `remat serve`, embedded (SQLite in /data)
#   docker run remat serve --queue redis://redis:6379/0 # an API replica in cluster mode
#   docker run remat worker --queue redis://redis:6379/0
# torch is not in the image: the service receives graphs, it never captures models.

FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
WORKDIR /src
COPY pyproject.toml README.md ./
COPY schedules ./schedules
COPY solvers ./solvers
COPY service ./service
COPY clients ./clients
RUN pip install . && python -c "import remat.service, remat.solvers"

FROM python:3.11-slim-bookworm
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
    REMAT_DATA_DIR=/data
USER 10001:10001
WORKDIR /home/remat
VOLUME ["/data"]
EXPOSE 8000
ENTRYPOINT ["tini", "--", "remat"]
CMD ["serve"]
