"""Reports: Markdown and figures from result files. Never measures; imports no torch."""
