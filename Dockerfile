# One image for every evalfleet service; the command picks the role.
FROM python:3.11-slim
WORKDIR /app
# Third-party packages come from the lock (exact versions, hashes checked), so the image
# is the set CI installs and runs in its production-install stage (.ci/production_install.py).
COPY requirements.lock ./
RUN pip install --no-cache-dir --require-hashes --no-deps -r requirements.lock
COPY pyproject.toml README.md ./
COPY evalfleet evalfleet
COPY workers workers
COPY producers producers
COPY prompts prompts
COPY migrations migrations
# The project itself, without extras and without pulling anything the lock does not pin.
# `pip check` fails the build when the lock misses a declared dependency (not one of an
# extra's, such as kombu[redis]'s: CI's production-install stage runs the fleet for those).
# A fixed uid and gid, so Kubernetes' runAsUser/runAsGroup (ops/k8s) match the image's user.
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /tmp/dist . \
    && pip install --no-cache-dir --no-deps /tmp/dist/*.whl && rm -rf /tmp/dist \
    && pip check \
    && groupadd --gid 10001 evalfleet \
    && useradd --uid 10001 --gid 10001 --create-home evalfleet
USER 10001:10001
# Embedded defaults and the beat schedule; Kubernetes mounts an emptyDir here.
ENV EVALFLEET_DATA_DIR=/tmp/evalfleet
# 8001: a worker's /livez and /readyz (ops/k8s probes, compose healthchecks); 9400:
# /metrics of workers and the beat; 8080: the ingest service; 8400: the judge simulator.
EXPOSE 8001 8080 8400 9400
ENTRYPOINT ["evalfleet"]
CMD ["--help"]
