# wa-outbox's image: `docker build -t wa-outbox .`, then `wa-outbox db upgrade` once per release and the web (the
# default command) and `wa-outbox worker` from it (docs/deploy.md, "The container image").
#
# BASE_IMAGE: any image with Python 3.11+ and its venv module (python3 -m venv); both stages use it, so the
# virtualenv built in the first runs in the second.
ARG BASE_IMAGE=python:3.11-slim

FROM ${BASE_IMAGE} AS build
# the build stage's image is left untagged: `docker image prune --filter label=wa-outbox.stage=build` removes it
LABEL wa-outbox.stage=build
# pip's own settings, for a private index or mirror (each reaches pip as its environment; unset ones stay unset)
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_FIND_LINKS
ARG PIP_NO_INDEX
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY . .
# The wheel from the checkout, then only that wheel and its dependencies (under constraints.txt's pins) into a
# virtualenv of its own: the one thing the runtime stage takes.
RUN python3 -m venv /opt/wa-outbox \
    && /opt/wa-outbox/bin/pip wheel --no-deps --wheel-dir /tmp/dist . \
    && /opt/wa-outbox/bin/pip install --constraint constraints.txt /tmp/dist/wa_outbox-*.whl \
    && /opt/wa-outbox/bin/wa-outbox --version

FROM ${BASE_IMAGE}
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/wa-outbox --shell /usr/sbin/nologin \
    wa-outbox
COPY --from=build /opt/wa-outbox /opt/wa-outbox
ENV PATH=/opt/wa-outbox/bin:$PATH PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1 PORT=8000
USER 10001:10001
WORKDIR /home/wa-outbox
# wa-outbox web listens on 0.0.0.0:$PORT (wa_outbox/gunicorn_conf.py): platforms that set PORT are obeyed
EXPOSE 8000
CMD ["wa-outbox", "web"]
