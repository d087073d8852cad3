"""Shared by every part of core: errors and cancellation, dtype names, the user's files, units."""
