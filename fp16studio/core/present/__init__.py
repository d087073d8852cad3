"""What a person reads: the shared vocabulary, terminal text, the HTML report, the exported script."""
