# One image for every evalfleet service; the command picks the role.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY evalfleet evalfleet
COPY workers workers
COPY producers producers
COPY prompts prompts
COPY migrations migrations
# A fixed uid, so Kubernetes' runAsNonRoot/runAsUser (ops/k8s) match the image's user.
RUN pip install --no-cache-dir . && useradd --uid 10001 --create-home evalfleet
USER 10001
# Embedded defaults and the beat schedule; Kubernetes mounts an emptyDir here.
ENV EVALFLEET_DATA_DIR=/tmp/evalfleet
# Workers serve /livez and /readyz here (ops/k8s probes, compose healthchecks).
EXPOSE 8001
ENTRYPOINT ["evalfleet"]
CMD ["--help"]
