"""The pipeline spec (a pure value), its documents and sessions, and the consent to run code."""
