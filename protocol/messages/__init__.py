"""Declarations of Kafka's messages, one module per API or small family of APIs."""
