# One image for every evalfleet service; the command picks the role.
FROM python:3.11-slim
WORKDIR /app
# Third-party packages come from the lock (exact versions, hashes checked), so the image
# is the set CI installs and runs in its production-install stage (.ci/production_install.sh).
COPY requirements.lock ./
RUN pip install --no-cache-dir --require-hashes --no-deps -r requirements.lock
COPY pyproject.toml README.md ./
COPY evalfleet evalfleet
COPY workers workers
COPY producers producers
COPY prompts prompts
COPY migrations migrations
# The project itself, without extras and without pulling anything the lock does not pin;
# `pip check` fails the build when the lock misses a dependency.
# A fixed uid, so Kubernetes' runAsNonRoot/runAsUser (ops/k8s) match the image's user.
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /tmp/dist . \
    && pip install --no-cache-dir --no-deps /tmp/dist/*.whl && rm -rf /tmp/dist \
    && pip check \
    && useradd --uid 10001 --create-home evalfleet
USER 10001
# Embedded defaults and the beat schedule; Kubernetes mounts an emptyDir here.
ENV EVALFLEET_DATA_DIR=/tmp/evalfleet
# Workers serve /livez and /readyz here (ops/k8s probes, compose healthchecks).
EXPOSE 8001
ENTRYPOINT ["evalfleet"]
CMD ["--help"]
