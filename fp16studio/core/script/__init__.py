"""Tracing a user's own script in a child process, and what it tells about their pipeline."""
