"""Crash tests: real broker processes killed with SIGKILL and restarted on the same data."""
