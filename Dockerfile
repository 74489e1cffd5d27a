# One image for every evalfleet service; the command picks the role.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY evalfleet evalfleet
COPY workers workers
COPY producers producers
COPY prompts prompts
COPY migrations migrations
RUN pip install --no-cache-dir . && useradd --create-home evalfleet
USER evalfleet
ENTRYPOINT ["evalfleet"]
CMD ["--help"]
