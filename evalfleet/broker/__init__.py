"""The broker: connection options and queue declarations, the atomic Redis consume,
queue depth and in-flight counts, for Redis, RabbitMQ and the embedded broker."""
